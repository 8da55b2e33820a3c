"""late.py - rank 0 binds MASTER_PORT a second late (as torch's TCPStore
does once rank 0 has imported torch); every other rank connects to
MASTER_ADDR:MASTER_PORT at once and, refused, tries again every 50 ms, as
a store client does. Every rank prints the MASTER_PORT it was given, which
must be the same on all; rank 0 prints each hello it got."""
import os
import socket
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("rank %d MASTER_PORT %d" % (rank, port), flush=True)
if rank == 0:
    time.sleep(1.0)
    s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))  # fails with EADDRINUSE while anything else holds it
    s.listen()
    for _ in range(world - 1):
        c, _ = s.accept()
        print("rank 0 got " + c.recv(100).decode(), flush=True)
        c.close()
else:
    deadline = time.time() + 30
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=10)
            break
        except ConnectionRefusedError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    c.sendall(b"hello from rank %d" % rank)
    c.close()
