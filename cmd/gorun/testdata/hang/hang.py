# A job that hangs on purpose: rank $HANG_RANK is stuck in read_batch
# while the others wait in wait_for_peers, until the file $HANG_RELEASE
# appears. Every rank prints "up R" first and "done R" last.
import os
import threading
import time

RANK = int(os.environ["RANK"])
RELEASE = os.environ["HANG_RELEASE"]


released = threading.Event()


def watch_release():
    # The polling is done here, on a thread of its own, so that the main
    # thread's stack stays the same from one look to the next.
    while not os.path.exists(RELEASE):
        time.sleep(0.05)
    released.set()


def read_batch():
    released.wait()


def wait_for_peers():
    released.wait()


def heartbeat(stop):
    stop.wait()


def main():
    stop = threading.Event()
    t = threading.Thread(target=heartbeat, args=(stop,), name="heartbeat")
    t.start()
    threading.Thread(target=watch_release, name="release", daemon=True).start()
    print(f"up {RANK}", flush=True)
    if RANK == int(os.environ["HANG_RANK"]):
        read_batch()
    else:
        wait_for_peers()
    stop.set()
    t.join()
    print(f"done {RANK}", flush=True)


main()
