# A PMI-1 client in the manner of MPICH's simple PMI, for gorun's PMI-1
# spawn: Debian's MPICH 4.0.2 (ch4:ucx) fails MPI_Comm_spawn before it
# reaches PMI, so this script speaks the wire itself. Run with no
# argument it is the parent: it spawns itself twice (one mcmd=spawn block
# per program, as PMI_Spawn_multiple sends them), putting
# PARENT_ROOT_PORT_NAME into the children's KVS. A child (PMI_SPAWNED=1)
# reads that key, and each prints what it saw. "fail" makes the parent
# spawn with an info key gorun refuses, and print the answer.
import os
import socket
import sys

fd = int(os.environ["PMI_FD"])
conn = socket.socket(fileno=fd)
f = conn.makefile("rw", newline="\n")


def call(line, want):
    f.write(line + "\n")
    f.flush()
    reply = f.readline().strip()
    kv = dict(t.split("=", 1) for t in reply.split(" ") if "=" in t)
    assert kv.get("cmd") == want, reply
    return kv


call("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init")
kvs = call("cmd=get_my_kvsname", "my_kvsname")["kvsname"]
rank, size = os.environ["PMI_RANK"], os.environ["PMI_SIZE"]
if os.environ.get("PMI_SPAWNED") == "1":
    port = call(f"cmd=get kvsname={kvs} key=PARENT_ROOT_PORT_NAME", "get_result")
    app = call("cmd=get_appnum", "appnum")["appnum"]
    print(f"child {rank} of {size} appnum {app} args {sys.argv[1:]} port {port.get('value')}", flush=True)
else:
    info = "info_num=1\ninfo_key_0=arch\ninfo_val_0=sparc\n" if sys.argv[1:] == ["fail"] else "info_num=0\n"
    block = ""
    for i, arg in enumerate(["first arg", "second"]):
        block += (f"mcmd=spawn\nnprocs={i + 1}\nexecname={sys.executable}\ntotspawns=2\nspawnssofar={i + 1}\n"
                  f"arg1={sys.argv[0]}\narg2={arg}\nargcnt=2\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n"
                  f"preput_val_0=port-of-{kvs}\n{info}endcmd\n")
    f.write(block)
    f.flush()
    print("parent: " + f.readline().strip(), flush=True)
call("cmd=barrier_in", "barrier_out")
call("cmd=finalize", "finalize_ack")
