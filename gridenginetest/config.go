package gridenginetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeFiles makes the state directory's tree and writes the files that do
// not depend on the running hosts: SGE_ROOT's links to Debian's binaries,
// the hosts' /etc/hosts and /etc/nsswitch.conf, the cell's bootstrap,
// act_qmaster and settings, and the configurations that start loads.
func (c *Cluster) writeFiles() error {
	// Cell/common stays empty: the hosts see CommonDir there.
	dirs := []string{"etc", "bin", "utilbin", "common", Cell, filepath.Join(Cell, "common"), "clients", "log", "jobs",
		"spool", filepath.Join("spool", "qmaster"), filepath.Join("spool", "execd"), "tmp"}
	for _, n := range c.nodes {
		dirs = append(dirs, filepath.Join("tmp", n.Name))
	}
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(c.Dir, d), 0o755); err != nil {
			return fmt.Errorf("gridenginetest: %w", err)
		}
	}
	// $SGE_ROOT/bin/ARCH (the clients), utilbin/ARCH (qrsh_starter) and
	// util (arch) are Debian's.
	links := map[string]string{
		filepath.Join("bin", c.Arch):     BinDir,
		filepath.Join("utilbin", c.Arch): BinDir,
		"util":                           UtilDir,
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(c.Dir, name)); err != nil {
			return fmt.Errorf("gridenginetest: %w", err)
		}
	}
	files := map[string]string{
		filepath.Join("etc", "hosts"):           c.hostsFile(),
		filepath.Join("etc", "nsswitch.conf"):   nsswitchConf,
		filepath.Join("etc", "global.conf"):     c.globalConf(),
		filepath.Join("common", "bootstrap"):    c.bootstrap(),
		filepath.Join("common", "act_qmaster"):  MasterHost + "\n",
		filepath.Join("common", "cluster_name"): ClusterName + "\n",
		filepath.Join("common", "settings.sh"): fmt.Sprintf("SGE_ROOT=%s; export SGE_ROOT\nSGE_CELL=%s; export SGE_CELL\n"+
			"SGE_QMASTER_PORT=%d; export SGE_QMASTER_PORT\nSGE_EXECD_PORT=%d; export SGE_EXECD_PORT\n", c.Dir, Cell, QmasterPort, ExecdPort),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("gridenginetest: %w", err)
		}
	}
	return nil
}

// nsswitchConf is the hosts' /etc/nsswitch.conf: names and addresses are
// looked up in /etc/hosts only, never in DNS.
const nsswitchConf = `# gorun gridenginetest: no DNS inside the cluster
passwd:         files
group:          files
shadow:         files
hosts:          files
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
`

// hostsFile returns the hosts' /etc/hosts.
func (c *Cluster) hostsFile() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# gorun gridenginetest cluster in %s\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n", c.Dir)
	fmt.Fprintf(&b, "%s\t%s\n", c.master.Addr, c.master.Name)
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "%s\t%s\n", n.Addr, n.Name)
	}
	return b.String()
}

// bootstrap returns the cell's bootstrap file: classic (flat file)
// spooling under the state directory, the daemons run as root.
func (c *Cluster) bootstrap() string {
	return fmt.Sprintf(`# Version: 8.1.9
admin_user              none
default_domain          none
ignore_fqdn             true
spooling_method         classic
spooling_lib            libspoolc
spooling_params         %[1]s;%[2]s
binary_path             %[3]s
qmaster_spool_dir       %[2]s
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
`, filepath.Join(c.Dir, Cell, "common"), filepath.Join(c.Dir, "spool", "qmaster"), BinDir)
}

// globalConf returns the global configuration, Debian's default with these
// changes: execd spool under the state directory, jobs of root allowed
// (min_uid 0), no mail, load reports every 5 s, the cluster's own gid_range
// (each execd has one of its own in its local configuration) and
// ENABLE_ADDGRP_KILL (the default, said out loud).
func (c *Cluster) globalConf() string {
	x := int(c.Subnet.Addr().As4()[2])
	lo := 300000 + 1000*x + 900
	return fmt.Sprintf(`# Version: 8.1.9
conf_version           0
execd_spool_dir        %s
mailer                 /bin/true
xterm                  /usr/bin/xterm
load_sensor            none
prolog                 none
epilog                 none
shell_start_mode       unix_behavior
login_shells           bash,sh,ksh,csh,tcsh
min_uid                0
min_gid                0
user_lists             none
xuser_lists            none
projects               none
xprojects              none
enforce_project        false
enforce_user           auto
load_report_time       00:00:05
max_unheard            00:05:00
reschedule_unknown     00:00:00
loglevel               log_info
administrator_mail     none
set_token_cmd          none
pag_cmd                none
token_extend_time      none
shepherd_cmd           none
qmaster_params         none
execd_params           ENABLE_ADDGRP_KILL=TRUE
reporting_params       accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00
finished_jobs          100
gid_range              %d-%d
qlogin_command         builtin
qlogin_daemon          builtin
rlogin_command         builtin
rlogin_daemon          builtin
rsh_command            builtin
rsh_daemon             builtin
max_aj_instances       2000
max_aj_tasks           75000
max_u_jobs             0
max_jobs               0
auto_user_oticket      0
auto_user_fshare       0
auto_user_default_project none
auto_user_delete_time  86400
delegated_file_staging false
reprioritize           0
jsv_url                none
jsv_allowed_mod        ac,h,i,e,o,j,M,N,p,w
`, filepath.Join(c.Dir, "spool", "execd"), lo, lo+49)
}

// schedConf is the scheduler configuration: Debian's default, but it runs
// every second and right after a submit or a job's end, and ignores load
// (another process's load on this machine never holds a job back).
const schedConf = `algorithm                         default
schedule_interval                 0:0:1
maxujobs                          0
queue_sort_method                 seqno
job_load_adjustments              NONE
load_adjustment_decay_time        0:0:0
load_formula                      slots
schedd_job_info                   true
flush_submit_sec                  1
flush_finish_sec                  1
params                            none
reprioritize_interval             0:0:0
halftime                          168
usage_weight_list                 cpu=1.000000,mem=0.000000,io=0.000000
compensation_factor               5.000000
weight_user                       0.250000
weight_project                    0.250000
weight_department                 0.250000
weight_job                        0.250000
weight_tickets_functional         0
weight_tickets_share              0
share_override_tickets            TRUE
share_functional_shares           TRUE
max_functional_jobs_to_schedule   200
report_pjob_tickets               TRUE
max_pending_tasks_per_job         50
halflife_decay_list               none
policy_hierarchy                  OFS
weight_ticket                     0.500000
weight_waiting_time               0.278000
weight_deadline                   3600000.000000
weight_urgency                    0.500000
weight_priority                   0.000000
max_reservation                   0
default_duration                  INFINITY
`

// peConf is the parallel environment PE.
var peConf = `pe_name            ` + PE + `
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $round_robin
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
`

// queueConf returns the cluster queue Queue: every exec host, Slots slots
// each, PE, /bin/sh with unix_behavior, no load thresholds, and a TMPDIR
// root per host (the hosts share the file system, and the TMPDIR of a job
// is named the same on every host).
func (c *Cluster) queueConf() string {
	tmp := filepath.Join(c.Dir, "tmp")
	for _, n := range c.nodes {
		tmp += fmt.Sprintf(",[%s=%s]", n.Name, filepath.Join(c.Dir, "tmp", n.Name))
	}
	return fmt.Sprintf(`qname                 %s
hostlist              %s
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               %s
rerun                 FALSE
slots                 %d
tmpdir                %s
shell                 /bin/sh
prolog                NONE
epilog                NONE
shell_start_mode      unix_behavior
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
`, Queue, strings.Join(c.NodeNames(), " "), PE, c.Slots, tmp)
}

// execHostConf returns exec host n's entry.
func execHostConf(n Host) string {
	return fmt.Sprintf("hostname              %s\nload_scaling          NONE\ncomplex_values        NONE\nuser_lists            NONE\n"+
		"xuser_lists           NONE\nprojects              NONE\nxprojects             NONE\nusage_scaling         NONE\nreport_variables      NONE\n", n.Name)
}

// writeWrappers writes a wrapper per client into ClientsDir. In one of the
// cluster's hosts (a job), a wrapper runs the client as it is; elsewhere,
// it enters the qmaster host's namespaces first, once it has checked that
// the host's holder is the same process.
func (c *Cluster) writeWrappers() error {
	var inside []string
	for _, p := range c.procs {
		if strings.HasPrefix(p.Name, "host-") {
			inside = append(inside, fmt.Sprintf("net:\\[%d\\]", p.Net))
		}
	}
	m := c.holder(MasterHost)
	for _, name := range clients {
		body := fmt.Sprintf(`#!/bin/sh
# gorun gridenginetest: %[1]s on the cluster in %[2]s. Inside the cluster it
# is %[3]s/%[1]s; outside it runs that on the qmaster host.
case "$(readlink /proc/self/ns/net)" in
%[4]s) exec %[3]s/%[1]s "$@" ;;
esac
if [ "$(readlink /proc/%[5]d/ns/net)" != "net:[%[6]d]" ] || [ "$(cut -d' ' -f22 /proc/%[5]d/stat 2>/dev/null)" != "%[7]d" ]; then
  echo "gridenginetest: the cluster in %[2]s is down" >&2
  exit 1
fi
exec nsenter --net=/proc/%[5]d/ns/net --uts=/proc/%[5]d/ns/uts --mount=/proc/%[5]d/ns/mnt --wd="$PWD" -- %[3]s/%[1]s "$@"
`, name, c.Dir, BinDir, strings.Join(inside, "|"), m.Pid, m.Net, m.Start)
		if err := os.WriteFile(filepath.Join(c.ClientsDir, name), []byte(body), 0o755); err != nil {
			return fmt.Errorf("gridenginetest: %w", err)
		}
	}
	return nil
}

// start starts the hosts, the network, the qmaster (after spooling the
// initial configuration), configures the cluster and starts the execds,
// and waits until every exec host's queue instance is available.
func (c *Cluster) start(ctx context.Context, pdeathsig bool) error {
	hosts := append([]Host{c.master}, c.nodes...)
	for _, h := range hosts {
		if _, err := c.startHolder(ctx, h, pdeathsig); err != nil {
			return err
		}
	}
	if err := c.makeNetwork(ctx); err != nil {
		return err
	}
	if err := c.writeWrappers(); err != nil {
		return err
	}
	qdir := filepath.Join(c.Dir, "spool", "qmaster")
	if err := c.adminScript(ctx, fmt.Sprintf(`%[1]s/spoolinit classic libspoolc '%[2]s;%[3]s' init
%[1]s/spooldefaults configuration '%[4]s'
%[1]s/spooldefaults complexes '%[5]s/resources/centry'
%[1]s/spooldefaults usersets '%[5]s/resources/usersets'
%[1]s/spooldefaults managers root
`, BinDir, filepath.Join(c.Dir, Cell, "common"), qdir, filepath.Join(c.Dir, "etc", "global.conf"), UtilDir)); err != nil {
		return err
	}
	qm, err := c.startDaemon("sge_qmaster", MasterHost, pdeathsig, BinDir+"/sge_qmaster")
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "sge_qmaster to answer", 30*time.Second, []*proc{qm}, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return c.Command(cctx, BinDir+"/qconf", "-sh").Run() == nil
	}); err != nil {
		return err
	}

	// The configuration, as files that qconf loads.
	etc := filepath.Join(c.Dir, "etc")
	files := map[string]string{"sched.conf": schedConf, "pe.conf": peConf, "queue.conf": c.queueConf()}
	script := fmt.Sprintf("qconf -Msconf %[1]s/sched.conf\nqconf -as %[2]s\n", etc, MasterHost)
	for _, n := range c.nodes {
		files["exechost-"+n.Name] = execHostConf(n)
		if err := os.MkdirAll(filepath.Join(etc, "local"), 0o755); err != nil {
			return fmt.Errorf("gridenginetest: %w", err)
		}
		// qconf -Aconf takes the host's name from the file's.
		files[filepath.Join("local", n.Name)] = "gid_range " + n.GIDs + "\n"
		script += fmt.Sprintf("qconf -ah %[2]s\nqconf -Ae %[1]s/exechost-%[2]s\nqconf -Aconf %[1]s/local/%[2]s\n", etc, n.Name)
	}
	script += fmt.Sprintf("qconf -Ap %[1]s/pe.conf\nqconf -Aq %[1]s/queue.conf\n", etc)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("gridenginetest: %w", err)
		}
	}
	if err := c.adminScript(ctx, script); err != nil {
		return err
	}

	watch := []*proc{qm}
	for _, n := range c.nodes {
		d, err := c.startDaemon("sge_execd-"+n.Name, n.Name, pdeathsig, BinDir+"/sge_execd")
		if err != nil {
			return err
		}
		watch = append(watch, d)
	}
	var states string
	return c.waitFor(ctx, "every exec host's queue instance to be available", 60*time.Second, watch, func() bool {
		var ok bool
		states, ok = c.queuesReady(ctx)
		return ok
	}, func() string { return "qstat -f: " + states })
}

// adminScript runs script with sh -e on the qmaster host, with the daemons'
// environment and Grid Engine's binaries first in PATH.
func (c *Cluster) adminScript(ctx context.Context, script string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := c.Command(ctx, "/bin/sh", "-ec", script)
	cmd.Env = append(c.daemonEnv(), "PATH="+BinDir+":"+daemonPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gridenginetest: configuring the cluster: %w: %s\nscript:\n%s%s", err, strings.TrimSpace(string(out)), script, c.logTails())
	}
	return nil
}

// queuesReady runs `qstat -f -q Queue` and reports whether every exec
// host's queue instance reports a load and has no state (such as u,
// unknown: its execd has not reported yet), with qstat's answer.
func (c *Cluster) queuesReady(ctx context.Context) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := c.Command(ctx, "qstat", "-f", "-q", Queue).CombinedOutput()
	s := strings.Join(strings.Fields(string(out)), " ")
	if err != nil {
		return s, false
	}
	ready := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 5 && strings.HasPrefix(f[0], Queue+"@") && f[3] != "-NA-" {
			ready[strings.TrimPrefix(f[0], Queue+"@")] = true
		}
	}
	for _, n := range c.nodes {
		if !ready[n.Name] {
			return s, false
		}
	}
	return s, true
}
