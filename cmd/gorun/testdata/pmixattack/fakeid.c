/* LD_PRELOAD'ed into the PMIx client: it claims the uid and gid in
 * FAKE_UID and FAKE_GID, which PMIx's native security sends over TCP as
 * the client's credential. */
#include <stdlib.h>
#include <sys/types.h>

static unsigned id(const char *name) {
    const char *s = getenv(name);
    return s ? (unsigned)atoi(s) : 0;
}

uid_t getuid(void) { return id("FAKE_UID"); }
uid_t geteuid(void) { return id("FAKE_UID"); }
gid_t getgid(void) { return id("FAKE_GID"); }
gid_t getegid(void) { return id("FAKE_GID"); }
