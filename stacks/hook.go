package stacks

// pythonHook is the sitecustomize.py that WritePythonHook writes. Its
// syntax is Python 2's as well as 3's, so that a Python 2 that finds it
// does nothing rather than fail on it. 384 is 0o600. WritePythonHook
// puts DumpSignal in place of @SIGNAL@.
const pythonHook = `# gorun's Python start-up hook, written by gorun (package stacks).
#
# Where GORUN_STACKS_DIR is set, faulthandler writes every thread's stack
# to GORUN_STACKS_DIR/<pid>.txt when the process gets signal
# GORUN_STACKS_SIGNAL, for "gorun stacks". The sitecustomize this file
# shadows then runs, as if this one were not there.
#
# Nothing here may raise: a failure leaves the program as it would be
# without the hook.


def _gorun_stacks():
    import os
    d = os.environ.get("GORUN_STACKS_DIR")
    if not d:
        return
    sig = int(os.environ.get("GORUN_STACKS_SIGNAL") or "@SIGNAL@")
    import faulthandler
    import _thread
    fds = []

    def arm():
        # In a forked child, the parent's file is not this process's.
        try:
            if fds:
                faulthandler.unregister(sig)
                os.close(fds.pop())
            fd = os.open(os.path.join(d, "%d.txt" % os.getpid()),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 384)
            fds.append(fd)
            os.write(fd, ("gorun stacks: main thread 0x%x\n" % _thread.get_ident()).encode())
            faulthandler.register(sig, file=fd, all_threads=True, chain=False)
        except Exception:
            pass

    arm()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=arm)


def _gorun_chain():
    # Import the sitecustomize this one shadows, from sys.path without
    # this file's directory, as site.py would have.
    import os
    import sys
    here = os.path.normcase(os.path.dirname(os.path.abspath(__file__)))
    me = sys.modules.pop("sitecustomize", None)
    removed = []
    for i, p in enumerate(sys.path):
        if os.path.normcase(os.path.abspath(p or os.curdir)) == here:
            removed.append((i, p))
    for i, p in reversed(removed):
        del sys.path[i]
    try:
        try:
            import sitecustomize
        except ImportError as e:
            if getattr(e, "name", "sitecustomize") != "sitecustomize":
                raise
            if me is not None:
                sys.modules["sitecustomize"] = me
    except Exception as err:
        if me is not None:
            sys.modules.setdefault("sitecustomize", me)
        try:
            if sys.flags.verbose:
                sys.excepthook(*sys.exc_info())
            else:
                sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                                 "%s: %s\n" % (err.__class__.__name__, err))
        except Exception:
            pass
    finally:
        for i, p in removed:
            sys.path.insert(i, p)


try:
    _gorun_stacks()
except Exception:
    pass
try:
    _gorun_chain()
except Exception:
    pass
`
