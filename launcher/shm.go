package launcher

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/procfs"
)

// shmDir is where shm_open puts POSIX shared memory, and where the MPI
// libraries keep their segments: Open MPI's vader_segment.* (sm_segment.*
// in Open MPI 5), MPICH's mpich_shar_tmp*, UCX's ucx_shm_posix_*.
const shmDir = "/dev/shm"

// shmSweep removes the files that a generation's killed ranks leave in
// /dev/shm. A rank that exits cleanly unlinks its segments; a killed one
// cannot, and Open MPI's then stay, holding memory until the next boot.
//
// A file is removed only when all of these hold, checked once the ranks
// and their orphans are gone:
//
//   - A rank the agent killed had it mapped (/proc/PID/maps, read just
//     before the kill), under a name directly in /dev/shm, and that name
//     still refers to the same file (device and inode). Names in
//     subdirectories are left alone: neither shm_open nor the MPI
//     libraries make any.
//   - It is a regular file of the agent's user: never another user's,
//     never a symlink.
//   - It was made during the generation: its inode was not among
//     /dev/shm's entries when the agent began to start the ranks (the
//     agent lists them then), and, where the file system records birth
//     times (statx's STATX_BTIME; tmpfs does on current kernels), it was
//     not born before that moment, to a clock tick. The listing is what
//     keeps the user's files from before the job; the birth time keeps
//     one renamed into /dev/shm during the job from a subdirectory. Where
//     /dev/shm could not be listed, nothing is removed.
//   - No live process maps it or holds it open. The job's ranks on this
//     host are gone by then, so such a process is outside the job:
//     another job's rank whose segment a rank had mapped, or the user's
//     own program. Only the processes that the agent may inspect count:
//     its user's (those not made undumpable) or, as root, all.
//
// So the killed ranks' own segments go, and a file that the user had
// before the job, another user's, or another job's that is still in use,
// stays. What could still go wrongly is narrow: a file of the agent's user
// made during the generation by a process outside the job, mapped by a
// rank, that no process the agent can see uses any more when it sweeps.
//
// Names are looked up with statx(2), not following symlinks, and unlinked
// with unlinkat(2), both on a descriptor of /dev/shm opened with
// O_NOFOLLOW|O_DIRECTORY, so that no symlink, in /dev/shm or standing in
// for it, can redirect a removal elsewhere.
//
// Its methods are called with the agent's mu held.
type shmSweep struct {
	dir string // "" is shmDir; tests use another directory

	// since is when the agent began to start the generation's ranks, on
	// the kernel's coarse clock (CLOCK_REALTIME_COARSE), which file
	// systems stamp birth times from (tmpfs here: in steps of a tick, a
	// few milliseconds), so that a file made later is never born before
	// it. A file born up to a tick before it passes this test; the
	// listing in before is what keeps such a file when it was in the
	// directory.
	since time.Time
	// dev and before identify the files in the directory at since: its
	// device and the inode numbers of its entries. before is nil when the
	// directory could not be read; then nothing is removed.
	dev    shmDev
	before map[uint64]bool
	// left is what killed ranks had mapped, by name in the directory.
	left map[string]shmFile
}

// shmDev is a device number as /proc/PID/maps and statx give it.
type shmDev struct{ major, minor uint32 }

// shmFile identifies a file: a name may be given to another file later.
type shmFile struct {
	dev shmDev
	ino uint64
}

// path is the directory swept.
func (s *shmSweep) path() string {
	if s.dir == "" {
		return shmDir
	}
	return s.dir
}

// openDir opens the directory for *at calls, refusing a symlink.
func (s *shmSweep) openDir() (int, error) {
	return unix.Open(s.path(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// begin records what the directory holds before a generation's ranks
// start. The agent calls it before forking any of them.
func (s *shmSweep) begin() {
	s.left, s.before = nil, nil
	var now unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &now)
	s.since = time.Unix(now.Unix())
	fd, err := s.openDir()
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	before := map[uint64]bool{}
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		if n <= 0 {
			break
		}
		direntInodes(buf[:n], before)
	}
	s.dev = shmDev{unix.Major(st.Dev), unix.Minor(st.Dev)}
	s.before = before
}

// direntInodes adds the inode numbers of the linux_dirent64 records in b
// to set.
func direntInodes(b []byte, set map[uint64]bool) {
	const nameOff = 19 // d_ino u64, d_off s64, d_reclen u16, d_type u8
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			return
		}
		set[binary.NativeEndian.Uint64(b[0:8])] = true
		b = b[reclen:]
	}
}

// note records the files directly in the directory that process pid has
// mapped. The agent calls it for each rank it is about to kill.
func (s *shmSweep) note(pid int) {
	for m := range procfs.Proc.FileMappings(pid) {
		name, ok := strings.CutPrefix(m.Path, s.path()+"/")
		if !ok || name == "" || strings.Contains(name, "/") || strings.HasSuffix(name, " (deleted)") {
			continue
		}
		if s.left == nil {
			s.left = map[string]shmFile{}
		}
		s.left[name] = mappedFile(m)
	}
}

// mappedFile is the identity of the file that m maps.
func mappedFile(m procfs.Mapping) shmFile {
	return shmFile{shmDev{m.Dev.Major, m.Dev.Minor}, m.Inode}
}

// sweep removes what the rule in [shmSweep] allows of the files noted
// since begin, forgets them, and returns the names it removed. The agent
// calls it once the killed ranks and their orphans are gone.
func (s *shmSweep) sweep() []string {
	left := s.left
	s.left = nil
	if len(left) == 0 || s.before == nil {
		return nil
	}
	fd, err := s.openDir()
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	uid := uint32(os.Getuid())
	cands := map[shmFile]string{}
	for name, f := range left {
		x, err := statAt(fd, name)
		if err == nil && x.Mode&unix.S_IFMT == unix.S_IFREG && x.Uid == uid &&
			fileOf(&x) == f && s.madeDuring(&x) {
			cands[f] = name
		}
	}
	if len(cands) == 0 {
		return nil
	}
	used := inUse(s.path(), cands)
	var removed []string
	for f, name := range cands {
		if !used[f] && unix.Unlinkat(fd, name, 0) == nil {
			removed = append(removed, name)
		}
	}
	return removed
}

// madeDuring says whether the file x was made after begin: its inode was
// not in the directory then, and it was not born before (where the file
// system records birth times).
func (s *shmSweep) madeDuring(x *unix.Statx_t) bool {
	if s.before == nil || fileOf(x).dev != s.dev || s.before[x.Ino] {
		return false
	}
	return x.Mask&unix.STATX_BTIME == 0 || !time.Unix(x.Btime.Sec, int64(x.Btime.Nsec)).Before(s.since)
}

// fileOf is the identity of the file x describes.
func fileOf(x *unix.Statx_t) shmFile {
	return shmFile{shmDev{x.Dev_major, x.Dev_minor}, x.Ino}
}

// statAt describes name in directory dirfd without following a symlink,
// with its birth time where the file system has one. Where statx is
// missing (before Linux 4.11) or forbidden (some seccomp filters), it
// falls back to fstatat, without a birth time.
func statAt(dirfd int, name string) (unix.Statx_t, error) {
	var x unix.Statx_t
	err := unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT,
		unix.STATX_TYPE|unix.STATX_UID|unix.STATX_INO|unix.STATX_BTIME, &x)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
		return x, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return x, err
	}
	return unix.Statx_t{
		Mask: unix.STATX_TYPE | unix.STATX_UID | unix.STATX_INO,
		Mode: uint16(st.Mode), Uid: st.Uid, Ino: st.Ino,
		Dev_major: unix.Major(st.Dev), Dev_minor: unix.Minor(st.Dev),
	}, nil
}

// inUse returns those of files that a live process maps or holds open,
// among the processes this one may inspect. Open descriptors are matched
// through their /proc/PID/fd links under dir, so that no other file
// system (a hung NFS mount) is asked about them.
func inUse(dir string, files map[shmFile]string) map[shmFile]bool {
	used := map[shmFile]bool{}
	for _, pid := range procfs.Proc.PIDs() {
		for m := range procfs.Proc.FileMappings(pid) {
			f := mappedFile(m)
			if _, ok := files[f]; ok {
				used[f] = true
			}
		}
		for link, target := range procfs.Proc.FDs(pid) {
			if !strings.HasPrefix(target, dir+"/") {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(link, &st) != nil {
				continue
			}
			f := shmFile{shmDev{unix.Major(st.Dev), unix.Minor(st.Dev)}, st.Ino}
			if _, ok := files[f]; ok {
				used[f] = true
			}
		}
	}
	return used
}
