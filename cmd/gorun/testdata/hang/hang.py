# A job that hangs on purpose: rank $HANG_RANK is stuck in read_batch
# while the others wait in wait_for_peers, until the file $HANG_RELEASE
# appears. Every rank prints "up R" first and "done R" last.
import os
import threading
import time

RANK = int(os.environ["RANK"])
RELEASE = os.environ["HANG_RELEASE"]


def released():
    return os.path.exists(RELEASE)


def read_batch():
    while not released():
        time.sleep(0.05)


def wait_for_peers():
    while not released():
        time.sleep(0.05)


def heartbeat(stop):
    stop.wait()


def main():
    stop = threading.Event()
    t = threading.Thread(target=heartbeat, args=(stop,), name="heartbeat")
    t.start()
    print(f"up {RANK}", flush=True)
    if RANK == int(os.environ["HANG_RANK"]):
        read_batch()
    else:
        wait_for_peers()
    stop.set()
    t.join()
    print(f"done {RANK}", flush=True)


main()
