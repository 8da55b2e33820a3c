import threading, time, sys, os
ev = threading.Event()
def waiter():
    ev.wait()
def blocker():
    r, w = os.pipe()
    os.read(r, 1)
th = threading.Thread(target=waiter, name="waiter-thread"); th.start()
print("ready", os.getpid(), flush=True)
blocker()
