// Package stacks reads a running process's stacks in its own language,
// on this host, without ending or changing it, and merges many ranks'
// stacks into a verdict that names the odd rank out: the one a hung job
// waits for.
//
// gorun's agent calls [Collect] for `gorun stacks JOB` and when
// --hang-timeout passes, and the head makes a [Verdict] of every rank's
// [Rank] with [NewVerdict].
//
// # What is read, and how
//
// [Collect] reads a rank's process and its descendants (at most 16,
// breadth first), each in its language:
//
//   - Native code (C, C++, Fortran, Rust, a Go program without gorun's
//     client): eu-stack -m -s -p PID (elfutils, a few ms), else
//     gdb -batch -p PID -ex 'thread apply all bt' (a few hundred ms, more
//     for a large program), else nothing but /proc. Every thread, each
//     frame with its function, shared object and, where there is debug
//     information, source line; gdb's frames get their shared object from
//     /proc/PID/maps by address. Both tools attach with ptrace and stop
//     the process while they unwind. A refused attach (another user,
//     Yama's ptrace_scope, a container) becomes a Note naming the cause.
//     A process with a thread in uninterruptible sleep (D) for 200 ms is
//     not attached to: it could not stop, and the tool would wait.
//   - Python (the executable or command is python*, or libpython is
//     mapped): every thread's Python frames, function, file and line, not
//     the interpreter's C frames. py-spy dump --json where py-spy is
//     installed; else gorun's start-up hook ([WritePythonHook]), which
//     ranks load through PYTHONPATH: Collect sends the hook's signal
//     ([DumpSignal]) and reads what faulthandler appends to the rank's
//     file in Options.StacksDir. It sends it only where the process has
//     the file and catches the signal (SigCgt in /proc/PID/status): a
//     Python run with -I, -S or -E, or any other program, did not load
//     the hook, and a real-time signal's default action would end it.
//     A program that takes the signal for itself (signal.signal,
//     faulthandler.register or unregister for it) has the hook rename its
//     file, and is not sent it either. Where neither works, the
//     interpreter's native frames, with a Note; where the program took
//     the signal, or sent no dump on it, a Notice too, which the
//     verdict's short form shows.
//   - Go ranks that use gorun's client are read by the agent through the
//     client (Method MethodGoClient), whose runtime.Stack text [ParseGo]
//     turns into one Thread a goroutine.
//   - Every process also gets, from /proc, its state letter, wait
//     channel, the system call its main thread is in, and its CPU time
//     ([ProcInfo]).
//
// Each tool runs in its own process group under a time limit and the
// caller's context, and is killed with its group when either ends; a
// process that a killed tool might have left with a pending stop is sent
// SIGCONT, which discards it.
//
// # Normalisation
//
// Ranks are compared by their main process ([MainProc]: the first that is
// not a shell or wrapper such as sh, env, timeout or numactl waiting for
// a child) and its main thread (the process's first thread, Python's
// main thread, goroutine 1), normalised by [Normalize] so that ranks at
// the same place compare equal however they got there and whenever they
// are sampled:
//
//   - Functions only: no addresses, arguments, offsets or lines.
//   - Native names lose symbol versions (@@GLIBC_2.34), C++ parameter
//     lists, GCC clone suffixes (.isra.0, .constprop.1, .cold) and the C
//     library's internal prefixes (__GI___libc_read is read); PMPI_
//     names are shown by their MPI_ names.
//   - Frames that every program or thread starts in are dropped: _start,
//     __libc_start_main, __libc_start_call_main, start_thread, clone3;
//     Python's runpy and threading bootstrap frames; Go's runtime.main and
//     runtime.goexit. So are the frames below __libc_start_main (a
//     program's _start, named or not) and the C library's frames without
//     a symbol at the start of a thread, under main or under a thread's
//     function: its start-up code, which the tools name only with glibc's
//     detached debug symbols (libc6-dbg), so that a stack reads the same
//     with or without them.
//   - A library's frames are collapsed into the one through which the
//     program entered it, the outermost of the run: a shared object for
//     native code, a package (under site-packages or dist-packages) or a
//     standard library module for Python, a standard library package for
//     Go (runtime.gopark <- runtime.chanrecv <- runtime.chanrecv1 is
//     runtime.chanrecv1). What that library calls in other libraries is
//     its own business and dropped too: MPICH's progress engine, whether
//     it polls in libmpich, UCX or libc at the moment, is MPI_Barrier,
//     so that two samples of a busy-polling rank agree. Code of the
//     program's own that a library calls back is kept.
//   - Python frames named as decorators name their wrappers (wrapper,
//     inner, _fn, decorate_context, torch's _call_impl...) pass calls on
//     and are never a library's entry point nor shown.
//   - A frame repeated in a row (inlined copies, recursion) is one frame.
//
// The [Rank.Signature] is the language and the normalised function names.
// Ranks whose stacks could not be read group by the reason and the
// system call they are in.
//
// # The verdict
//
// [NewVerdict] groups ranks by signature, smallest group first; the odd
// ranks are those of every group smaller than the largest. Its text
// ([Verdict.WriteText]) reads:
//
//	gorun: stacks of 16 ranks on 4 hosts
//	  rank 2 on h3: read <- next_batch <- train_step
//	  ranks 0-1,3-15 on h1-h4: MPI_Barrier <- sync_grads <- main
//	gorun: verdict: rank 2 on h3 differs from the 15 others: read <- next_batch <- train_step
//
// and its JSON is its fields'.
package stacks
