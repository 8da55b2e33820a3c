"""gate.py - rank 0 listens on its MASTER_PORT a second late; every other
rank connects to MASTER_ADDR:MASTER_PORT at once, as torch's TCPStore
clients do, and must not be refused: gorun holds MASTER_PORT from before
the ranks start and passes the connection on to rank 0. Each other rank
prints what rank 0 answered."""
import os
import socket
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    time.sleep(1.0)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", port))
    s.listen()
    for _ in range(world - 1):
        c, _ = s.accept()
        c.sendall(b"rank 0 got " + c.recv(100))
        c.close()
else:
    c = socket.create_connection((addr, port), timeout=10)  # refused: a traceback, exit 1
    c.sendall(b"hello from rank %d" % rank)
    print(c.recv(100).decode(), flush=True)
