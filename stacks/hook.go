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
# A program that takes that signal for itself (signal.signal,
# faulthandler.register or faulthandler.unregister for it) keeps it: the
# file becomes <pid>.off, which tells gorun not to send the signal and
# why, and a forked child makes no file of its own.
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
    try:
        # signal.signal calls _signal.signal; the signal module itself
        # imports enum, which would take milliseconds here.
        import _signal as signal
    except ImportError:
        import signal
    register, unregister = faulthandler.register, faulthandler.unregister
    armed = []  # (pid, fd) of this process's file
    off = []  # not empty once the program has taken the signal

    def path(pid, ext):
        return os.path.join(d, "%d.%s" % (pid, ext))

    def arm():
        # In a forked child, the parent's file is not this process's.
        try:
            if off:
                return
            if armed:
                unregister(sig)
                os.close(armed.pop()[1])
            pid = os.getpid()
            fd = os.open(path(pid, "txt"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 384)
            armed.append((pid, fd))
            os.write(fd, ("gorun stacks: main thread 0x%x\n" % _thread.get_ident()).encode())
            register(sig, file=fd, all_threads=True, chain=False)
            try:
                os.unlink(path(pid, "off"))  # a process's of the same pid, before
            except OSError:
                pass
        except Exception:
            pass

    def step_aside():
        # The program takes the signal: gorun must not send it any more.
        # The file is renamed at once; it is closed once the program's
        # call is done, as faulthandler may write to it until then.
        # Returns None where the hook had stepped aside already, else
        # [(pid, fd)] or [] (no file of this process's).
        if off:
            return None
        off.append(True)
        try:
            if armed and armed[-1][0] == os.getpid():
                os.rename(path(armed[-1][0], "txt"), path(armed[-1][0], "off"))
                return [armed.pop()]
        except Exception:
            pass
        return []

    def stepped_aside(was, call, ok):
        if was is None:
            return
        try:
            if not ok:  # the call changed nothing: the hook stays
                del off[:]
                for pid, fd in was:
                    os.rename(path(pid, "off"), path(pid, "txt"))
                    armed.append((pid, fd))
                return
            for pid, fd in was:
                try:
                    os.write(fd, ("gorun stacks: off: %s\n" % call).encode())
                finally:
                    os.close(fd)
        except Exception:
            pass

    def wrap(module, name, call):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            try:
                num = args[0] if args else kwargs.get("signalnum", kwargs.get("signum"))
                mine = int(num) == sig
            except Exception:
                mine = False
            if not mine:
                return real(*args, **kwargs)
            was = step_aside()
            try:
                result = real(*args, **kwargs)
            except BaseException:
                stepped_aside(was, call, False)
                raise
            stepped_aside(was, call, True)
            return result

        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(wrapper, attr, getattr(real, attr))
            except Exception:
                pass
        wrapper.__wrapped__ = real
        setattr(module, name, wrapper)

    arm()
    if not armed:
        return
    wrap(signal, "signal", "signal.signal")
    wrap(faulthandler, "register", "faulthandler.register")
    wrap(faulthandler, "unregister", "faulthandler.unregister")
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
