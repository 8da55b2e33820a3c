package peerargs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Open MPI's MCA parameters (--mca NAME VALUE) are read by the ranks' own
// Open MPI (btl, pml, coll, ...: gorun exports them as OMPI_MCA_NAME) or
// by Open MPI's launcher, ORTE: mpirun and its orted daemons, which gorun
// replaces. A launcher's parameter exported to the ranks would change
// nothing, silently: MCA reads those that gorun has a way for as gorun's
// flags, refuses those it has none for with the way, and notes the rest.

// launcherFrameworks are the MCA frameworks of Open MPI 4.1's ORTE (the
// parameters named FRAMEWORK or FRAMEWORK_...).
var launcherFrameworks = []string{"plm", "ras", "rmaps", "odls", "orte", "routed", "errmgr", "filem", "iof", "state", "rtc", "grpcomm"}

// Ways of the launcher's parameters that gorun refuses.
const (
	waySSHClient = "gorun reaches hosts through its own SSH client, which reads ~/.ssh/config (--ssh-config FILE, --ssh-port PORT, -i KEY)"
	noteORTE     = "ignored: a parameter of Open MPI's launcher (mpirun and its orted daemons), which gorun replaces; the ranks do not read it"
)

// MCA reads Open MPI's --mca NAME VALUE (also -mca, --gmca) and returns
// the gorun arguments it becomes: -x OMPI_MCA_NAME=VALUE for the ranks'
// own parameters; for the launcher's, gorun's flag (plm_rsh_args "-p
// 2222" is --ssh-port 2222, rmaps_base_mapping_policy node is --map-by
// node), a note where it changes nothing, or an error that names the
// gorun way.
func MCA(name, value string) (args []string, note string, err error) {
	switch name {
	case "plm_rsh_args":
		return sshArgs(value)
	case "plm_rsh_agent", "orte_rsh_agent", "plm_rsh_launch_agent":
		return nil, "", errors.New(waySSHClient)
	case "rmaps":
		switch value {
		case "seq":
			return []string{"--map-by", "seq"}, "", nil
		case "round_robin", "ppr":
			return nil, "", nil // gorun's own mapping, chosen by --map-by
		case "rank_file":
			return nil, "", errors.New("give the rankfile: --rankfile FILE")
		}
		return nil, "", errors.New("gorun maps ranks by --map-by (slot, node, seq, ppr:N:OBJ) or a --rankfile FILE")
	case "rmaps_base_mapping_policy":
		return sub(mapBy, "--map-by", value)
	case "hwloc_base_binding_policy":
		return sub(bindTo, "--bind-to", value)
	case "rmaps_base_oversubscribe":
		on, err := strconv.ParseBool(value)
		if err != nil {
			return nil, "", fmt.Errorf("%q: want 1 or 0", value)
		}
		return []string{"--oversubscribe=" + strconv.FormatBool(on)}, "", nil
	case "rmaps_base_no_oversubscribe":
		on, err := strconv.ParseBool(value)
		if err != nil {
			return nil, "", fmt.Errorf("%q: want 1 or 0", value)
		}
		return []string{"--oversubscribe=" + strconv.FormatBool(!on)}, "", nil
	}
	framework, _, _ := strings.Cut(name, "_")
	for _, f := range launcherFrameworks {
		if framework == f {
			return nil, noteORTE, nil
		}
	}
	return []string{"-x", "OMPI_MCA_" + name + "=" + value}, "", nil
}

// sub runs one of mpirun's flag actions (mapBy, bindTo) on value alone
// and returns what it wrote.
func sub(do func(*parser, string, []string) error, typed, value string) ([]string, string, error) {
	p := &parser{tool: MPIRun}
	p.dst = &p.out
	if err := do(p, typed, []string{value}); err != nil {
		return nil, "", err
	}
	return p.out, strings.Join(p.notes, "; "), nil
}

// MapBy reads a --map-by of Open MPI's, with its modifiers
// (slot:PE=2, ppr:2:socket, node:OVERSUBSCRIBE), and returns the gorun
// arguments it becomes (--map-by slot --cpus-per-rank 2).
func MapBy(spec string) ([]string, error) {
	args, _, err := sub(mapBy, "--map-by "+spec, spec)
	return args, err
}

// sshArgs reads plm_rsh_args, the ssh options mpirun adds: -p PORT,
// -F CONFIG, -i KEY and -o StrictHostKeyChecking=no (or accept-new) have
// gorun flags; -x, -X, -q, -T and -n change nothing under gorun.
func sshArgs(value string) (args []string, note string, err error) {
	f := strings.Fields(value)
	for i := 0; i < len(f); i++ {
		a := f[i]
		opt, val := a, ""
		if len(a) > 2 && a[0] == '-' && strings.ContainsRune("pFilo", rune(a[1])) {
			opt, val = a[:2], a[2:]
		}
		needs := strings.Contains("-p -F -i -o -l", opt) && len(opt) == 2
		if needs && val == "" {
			if i+1 >= len(f) {
				return nil, "", fmt.Errorf("ssh option %s: takes a value", opt)
			}
			i++
			val = f[i]
		}
		switch opt {
		case "-p":
			args = append(args, "--ssh-port", val)
		case "-F":
			args = append(args, "--ssh-config", val)
		case "-i":
			args = append(args, "-i", val)
		case "-o":
			k, v, _ := strings.Cut(val, "=")
			switch {
			case strings.EqualFold(k, "Port"):
				args = append(args, "--ssh-port", v)
			case strings.EqualFold(k, "StrictHostKeyChecking") && (v == "no" || v == "accept-new"):
				args = append(args, "--ssh-accept-new")
				note = "gorun records the keys of hosts it does not know yet; a changed key is still refused"
			default:
				return nil, "", fmt.Errorf("ssh option -o %s: put it in an ssh config file: --ssh-config FILE (gorun reads ~/.ssh/config)", val)
			}
		case "-l":
			return nil, "", fmt.Errorf("ssh option -l %s: give the user with each host (%s@HOST in -H or the hostfile)", val, val)
		case "-x", "-X", "-q", "-T", "-n":
		default:
			return nil, "", fmt.Errorf("ssh option %s: gorun's SSH client takes -p PORT, -F CONFIG, -i KEY and -o StrictHostKeyChecking=no; put others in an ssh config file (--ssh-config FILE)", a)
		}
	}
	return args, note, nil
}
