// Package connbase is what gorun's built-in transports (tcp and shm) share
// around their own protocols: the base every connection embeds ([Base]:
// its peer, its errors, its memory registrations) and the listening side
// ([Listener]: the accept loop, the streams still in their hello, the
// queue of connections for Accept, and the teardown). Each transport keeps
// its own handshake and data path.
package connbase
