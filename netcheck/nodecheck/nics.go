package nodecheck

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/gorun/gorun/topology"
)

// ibDir holds the RDMA devices in sysfs.
const ibDir = "sys/class/infiniband"

// Label names the port in messages: "mlx5_0 port 1 (ib0)".
func (p NICPort) Label() string {
	s := p.Name + " port " + strconv.Itoa(p.Port)
	if p.Netdev != "" {
		s += " (" + p.Netdev + ")"
	}
	return s
}

// afterColon returns a sysfs state without its number: "4: ACTIVE" is
// "ACTIVE".
func afterColon(s string) string {
	if _, v, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(v)
	}
	return strings.TrimSpace(s)
}

// parseRate reads an RDMA port's rate ("100 Gb/sec (4X EDR)") in Gb/s,
// 0 when it has none.
func parseRate(s string) float64 {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "Gb/sec" {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

func readTrim(fsys fs.FS, name string) string {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readPorts reads every port of every RDMA device under fsys's
// sys/class/infiniband. When node is not nil, only the devices it knows
// (backed by a PCI function: soft RoCE and the like are left out) count,
// and it names their netdevs and models. No such directory is no ports.
func readPorts(fsys fs.FS, node *topology.Node) ([]NICPort, error) {
	devs, err := fs.ReadDir(fsys, ibDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("RDMA devices: %w", err)
	}
	var out []NICPort
	for _, d := range devs {
		netdev, model, known := fromNode(node, d.Name())
		if node != nil && !known {
			continue
		}
		dir := ibDir + "/" + d.Name()
		if model == "" {
			if v, dv := readTrim(fsys, dir+"/device/vendor"), readTrim(fsys, dir+"/device/device"); v != "" && dv != "" {
				model = v + ":" + dv
			}
		}
		ports, err := fs.ReadDir(fsys, dir+"/ports")
		if err != nil {
			return nil, fmt.Errorf("RDMA device %s: %w", d.Name(), err)
		}
		for _, p := range ports {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			pd := dir + "/ports/" + p.Name()
			rate := readTrim(fsys, pd+"/rate")
			out = append(out, NICPort{
				Name: d.Name(), Netdev: netdev, Port: n, Model: model,
				State:     afterColon(readTrim(fsys, pd+"/state")),
				PhysState: afterColon(readTrim(fsys, pd+"/phys_state")),
				LinkLayer: readTrim(fsys, pd+"/link_layer"),
				Rate:      rate, RateGbps: parseRate(rate),
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Port < out[j].Port
	})
	return out, nil
}

// fromNode returns what node knows of RDMA device dev: its netdev (when
// it has one of another name), its PCI model ("0x15b3:0x1021"), and
// whether node knows it at all.
func fromNode(node *topology.Node, dev string) (netdev, model string, known bool) {
	if node == nil {
		return "", "", false
	}
	for _, nic := range node.NICs {
		if nic.IBDevice != dev {
			continue
		}
		known = true
		if nic.Name != dev {
			netdev = nic.Name
		}
		if d := node.PCI[nic.BusID]; d != nil && d.Vendor != "" {
			model = d.Vendor + ":" + d.Device
		}
	}
	return netdev, model, known
}
