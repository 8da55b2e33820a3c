// Package jobs lets gorun's commands reach the jobs that are running.
//
// Each head publishes its job: it serves requests on a per-job socket
// (TCP, TLS 1.3 with a certificate made for the job) and writes a job
// file, <id>.json in the user's job directory ($GORUN_JOBS_DIR, else
// ~/.gorun/jobs, mode 0700), that holds the socket's addresses, the
// certificate's fingerprint and a key. The file is the user's alone
// (0600): only the job's user (and root) can read the key, and the head
// answers nobody who does not present it. A client pins the certificate,
// so the key never reaches anyone else. Where home directories are
// shared, any host that reaches the head's address can ask it.
//
// gorun ps lists the files whose heads are alive; gorun status and gorun
// stacks send one request each (or one a second with --watch) and print
// the answer. A request is one JSON line, and so is the answer.
//
// The socket cannot be held by those who cannot present the key: a head
// closes at once a connection from another user of its host (the kernel
// says whose it is), serves 16 requests at a time, and lets 64
// connections wait for a client's key, 16 of them from one address of
// another host; a new connection takes the place of one that has sent
// nothing, or of one that has waited a second. A client whose connection
// is closed before the answer asks again, for up to 10 s, and then says
// that the socket is full or flooded.
package jobs
