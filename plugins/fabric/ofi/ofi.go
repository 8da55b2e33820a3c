//go:build cgo && linux

package ofi

/*
#cgo pkg-config: libfabric
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

// The completion batch read by one fi_cq_read.
#define GOFI_BATCH 64

static int gofi_getinfo(const char *prov, int directed, struct fi_info **out) {
	struct fi_info *hints = fi_allocinfo();
	int ret;
	if (hints == NULL)
		return -FI_ENOMEM;
	hints->caps = FI_TAGGED | FI_MSG | (directed ? FI_DIRECTED_RECV : 0);
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	// What this binding copes with: it registers local buffers when asked
	// (FI_MR_LOCAL), registers only malloc'ed memory (FI_MR_ALLOCATED),
	// and never does RMA (FI_MR_VIRT_ADDR, FI_MR_PROV_KEY are moot).
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	if (prov != NULL && prov[0] != '\0') {
		hints->fabric_attr->prov_name = strdup(prov);
		if (hints->fabric_attr->prov_name == NULL) {
			fi_freeinfo(hints);
			return -FI_ENOMEM;
		}
	}
	ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, out);
	fi_freeinfo(hints);
	return ret;
}

static const char *gofi_prov(struct fi_info *i) { return i->fabric_attr->prov_name; }
static const char *gofi_fabric(struct fi_info *i) { return i->fabric_attr->name; }
static const char *gofi_domain(struct fi_info *i) { return i->domain_attr->name; }
static int gofi_mr_local(struct fi_info *i) { return (i->domain_attr->mr_mode & FI_MR_LOCAL) != 0; }
static int gofi_mr_prov_key(struct fi_info *i) { return (i->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0; }
static int gofi_directed(struct fi_info *i) { return (i->caps & FI_DIRECTED_RECV) != 0; }

// gofi_open builds fabric, domain, cq, av and endpoint; on failure it
// closes what it opened, and names the failing call in *op.
static int gofi_open(struct fi_info *info, struct fid_fabric **fabric, struct fid_domain **domain,
		struct fid_cq **cq, struct fid_av **av, struct fid_ep **ep, const char **op) {
	struct fi_cq_attr cq_attr;
	struct fi_av_attr av_attr;
	int ret;

	*fabric = NULL; *domain = NULL; *cq = NULL; *av = NULL; *ep = NULL;
	*op = "fi_fabric";
	ret = fi_fabric(info->fabric_attr, fabric, NULL);
	if (ret) goto fail;
	*op = "fi_domain";
	ret = fi_domain(*fabric, info, domain, NULL);
	if (ret) goto fail;
	memset(&cq_attr, 0, sizeof cq_attr);
	cq_attr.format = FI_CQ_FORMAT_TAGGED;
	cq_attr.wait_obj = FI_WAIT_NONE;
	*op = "fi_cq_open";
	ret = fi_cq_open(*domain, &cq_attr, cq, NULL);
	if (ret) goto fail;
	memset(&av_attr, 0, sizeof av_attr);
	av_attr.type = FI_AV_TABLE;
	*op = "fi_av_open";
	ret = fi_av_open(*domain, &av_attr, av, NULL);
	if (ret) goto fail;
	*op = "fi_endpoint";
	ret = fi_endpoint(*domain, info, ep, NULL);
	if (ret) goto fail;
	*op = "fi_ep_bind(cq)";
	ret = fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV);
	if (ret) goto fail;
	*op = "fi_ep_bind(av)";
	ret = fi_ep_bind(*ep, &(*av)->fid, 0);
	if (ret) goto fail;
	*op = "fi_enable";
	ret = fi_enable(*ep);
	if (ret) goto fail;
	*op = NULL;
	return 0;
fail:
	if (*ep) fi_close(&(*ep)->fid);
	if (*av) fi_close(&(*av)->fid);
	if (*cq) fi_close(&(*cq)->fid);
	if (*domain) fi_close(&(*domain)->fid);
	if (*fabric) fi_close(&(*fabric)->fid);
	*fabric = NULL; *domain = NULL; *cq = NULL; *av = NULL; *ep = NULL;
	return ret;
}

static int gofi_close(struct fid *f) { return f ? fi_close(f) : 0; }
static struct fid *gofi_ep_fid(struct fid_ep *p) { return &p->fid; }
static struct fid *gofi_av_fid(struct fid_av *p) { return &p->fid; }
static struct fid *gofi_cq_fid(struct fid_cq *p) { return &p->fid; }
static struct fid *gofi_domain_fid(struct fid_domain *p) { return &p->fid; }
static struct fid *gofi_fabric_fid(struct fid_fabric *p) { return &p->fid; }
static struct fid *gofi_mr_fid(struct fid_mr *p) { return &p->fid; }

static int gofi_getname(struct fid_ep *ep, void *addr, size_t *len) {
	return fi_getname(&ep->fid, addr, len);
}

static int gofi_av_insert(struct fid_av *av, const void *addr, fi_addr_t *out) {
	return fi_av_insert(av, addr, 1, out, 0, NULL);
}

static int gofi_mr_reg(struct fid_domain *d, void *buf, size_t len, uint64_t key,
		struct fid_mr **mr, void **desc) {
	int ret = fi_mr_reg(d, buf, len, FI_SEND | FI_RECV, 0, key, 0, mr, NULL);
	if (ret == 0)
		*desc = fi_mr_desc(*mr);
	return ret;
}

static ssize_t gofi_tsend(struct fid_ep *ep, void *buf, size_t len, void *desc,
		fi_addr_t dest, uint64_t tag, void *ctx) {
	return fi_tsend(ep, buf, len, desc, dest, tag, ctx);
}

static ssize_t gofi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		fi_addr_t src, uint64_t tag, void *ctx) {
	return fi_trecv(ep, buf, len, desc, src, tag, 0, ctx);
}

static int gofi_cancel(struct fid_ep *ep, void *ctx) {
	return (int)fi_cancel(&ep->fid, ctx);
}

static ssize_t gofi_cq_read(struct fid_cq *cq, struct fi_cq_tagged_entry *ents) {
	return fi_cq_read(cq, ents, GOFI_BATCH);
}

// gofi_cq_readerr reads one error completion and copies the provider's
// explanation of it (if any) into msg.
static ssize_t gofi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *e, char *msg, size_t mlen) {
	ssize_t ret;
	const char *s;
	memset(e, 0, sizeof *e);
	msg[0] = '\0';
	ret = fi_cq_readerr(cq, e, 0);
	if (ret < 0)
		return ret;
	if (e->prov_errno != 0) {
		s = fi_cq_strerror(cq, e->prov_errno, e->err_data, NULL, 0);
		if (s != NULL) {
			strncpy(msg, s, mlen - 1);
			msg[mlen - 1] = '\0';
		}
	}
	return ret;
}
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// fiETRUNC (api.go) must be libfabric's FI_ETRUNC: both conversions
// overflow at compile time otherwise.
const (
	_ = uint(fiETRUNC - C.FI_ETRUNC)
	_ = uint(C.FI_ETRUNC - fiETRUNC)
)

const (
	cqBatch   = C.GOFI_BATCH
	errMsgLen = 256
	// maxCQRounds bounds the fi_cq_read calls of one Progress, so that a
	// busy CQ cannot starve the callers waiting for the endpoint's lock.
	maxCQRounds = 16
)

// fiError builds the error of libfabric call op that returned ret (a
// negative FI_E* code) on provider prov. op may name the object the call
// was on in parentheses, as in "fi_close(domain)".
func fiError(prov, op string, ret C.ssize_t) error {
	code := int(-ret)
	call, obj := op, ""
	if i := strings.IndexByte(op, '('); i > 0 && strings.HasSuffix(op, ")") {
		call, obj = op[:i], ", "+op[i+1:len(op)-1]
	}
	return fmt.Errorf("ofi: %s(provider %q%s): %w", call, prov, obj,
		&Error{Op: call, Code: code, Msg: C.GoString(C.fi_strerror(C.int(code)))})
}

// getinfo runs fi_getinfo; a nil list with a nil error means no provider
// matched (FI_ENODATA).
func getinfo(prov string, directed bool) (*C.struct_fi_info, error) {
	var cprov *C.char
	if prov != "" {
		cprov = C.CString(prov)
		defer C.free(unsafe.Pointer(cprov))
	}
	d := C.int(0)
	if directed {
		d = 1
	}
	var list *C.struct_fi_info
	ret := C.gofi_getinfo(cprov, d, &list)
	if ret == -C.FI_ENODATA {
		return nil, nil
	}
	if ret != 0 {
		return nil, fiError(prov, "fi_getinfo", C.ssize_t(ret))
	}
	return list, nil
}

func infoOf(i *C.struct_fi_info) Info {
	return Info{
		Provider:     C.GoString(C.gofi_prov(i)),
		Fabric:       C.GoString(C.gofi_fabric(i)),
		Domain:       C.GoString(C.gofi_domain(i)),
		DirectedRecv: C.gofi_directed(i) != 0,
		MRLocal:      C.gofi_mr_local(i) != 0,
	}
}

// Providers lists the providers (with fabric and domain) that offer
// reliable-datagram endpoints with tagged and untagged messaging. hint
// restricts the list to one provider name such as "tcp;ofi_rxm", "shm",
// "verbs;ofi_rxm" or "efa"; "" lists all. No match is an empty list and a
// nil error. Duplicates (a provider may report one fabric/domain several
// times, with different attributes) are listed once.
func Providers(hint string) ([]Info, error) {
	list, err := getinfo(hint, false)
	if err != nil || list == nil {
		return nil, err
	}
	defer C.fi_freeinfo(list)
	var out []Info
	seen := map[Info]bool{}
	for i := list; i != nil; i = i.next {
		info := infoOf(i)
		info.DirectedRecv = false
		if !seen[info] {
			seen[info] = true
			out = append(out, info)
		}
	}
	return out, nil
}

// Endpoint is an open reliable-datagram endpoint of one provider, with its
// fabric, domain, completion queue and address vector. It is safe for
// concurrent use; Close releases it.
type Endpoint struct {
	mu       sync.Mutex
	prov     string
	info     Info
	fi       *C.struct_fi_info
	fabric   *C.struct_fid_fabric
	domain   *C.struct_fid_domain
	cq       *C.struct_fid_cq
	av       *C.struct_fid_av
	ep       *C.struct_fid_ep
	cqbuf    *C.struct_fi_cq_tagged_entry // C array of cqBatch entries
	errEntry *C.struct_fi_cq_err_entry    // C memory for fi_cq_readerr
	errMsg   *C.char                      // C memory for the provider's error text
	mrLocal  bool                         // register local buffers (FI_MR_LOCAL)
	provKey  bool                         // the provider picks MR keys
	directed bool                         // FI_DIRECTED_RECV enabled
	nextKey  uint64
	reqs     map[uintptr]*Request // in flight, by C address of their fi_context2
	sendq    []*Request           // sends waiting for room (-FI_EAGAIN), in order
	recvq    []*Request           // receives waiting for room, in order
	mrs      map[*MR]struct{}     // open MRs with a libfabric registration
	closed   bool
}

// Open opens an Endpoint on the first fabric/domain that fi_getinfo reports
// for provider (e.g. "tcp;ofi_rxm", "shm"; "" takes libfabric's first
// choice): fabric, domain, an FI_EP_RDM endpoint with FI_TAGGED and FI_MSG
// (and FI_DIRECTED_RECV when the provider has it), a completion queue in
// FI_CQ_FORMAT_TAGGED and an FI_AV_TABLE address vector, bound and enabled.
func Open(provider string) (*Endpoint, error) { return OpenDomain(provider, "") }

// OpenDomain is Open restricted to the fabric/domain named domain (as
// Info.Domain reports it, e.g. "mlx5_1", "eth0"); "" takes the first one, as
// Open does. A domain that the provider does not report is an error wrapping
// an *Error with FI_ENODATA.
func OpenDomain(provider, domain string) (*Endpoint, error) {
	list, err := getinfo(provider, true)
	if err == nil {
		list = pickDomain(list, domain)
	}
	if err == nil && list == nil {
		list, err = getinfo(provider, false)
		if err == nil {
			list = pickDomain(list, domain)
		}
	}
	if err != nil {
		return nil, err
	}
	if list == nil {
		what := "no provider offers FI_EP_RDM with FI_TAGGED|FI_MSG"
		if domain != "" {
			what += " on domain " + strconv.Quote(domain)
		}
		return nil, fmt.Errorf("ofi: fi_getinfo(provider %q): %s: %w", provider, what,
			&Error{Op: "fi_getinfo", Code: C.FI_ENODATA, Msg: C.GoString(C.fi_strerror(C.FI_ENODATA))})
	}
	e := &Endpoint{
		prov:     provider,
		info:     infoOf(list),
		fi:       list,
		mrLocal:  C.gofi_mr_local(list) != 0,
		provKey:  C.gofi_mr_prov_key(list) != 0,
		directed: C.gofi_directed(list) != 0,
		reqs:     map[uintptr]*Request{},
		mrs:      map[*MR]struct{}{},
	}
	if e.prov == "" {
		e.prov = e.info.Provider
	}
	var op *C.char
	if ret := C.gofi_open(list, &e.fabric, &e.domain, &e.cq, &e.av, &e.ep, &op); ret != 0 {
		C.fi_freeinfo(list)
		return nil, fiError(e.prov, C.GoString(op), C.ssize_t(ret))
	}
	e.cqbuf = (*C.struct_fi_cq_tagged_entry)(C.calloc(cqBatch, C.sizeof_struct_fi_cq_tagged_entry))
	e.errEntry = (*C.struct_fi_cq_err_entry)(C.calloc(1, C.sizeof_struct_fi_cq_err_entry))
	e.errMsg = (*C.char)(C.calloc(1, errMsgLen))
	return e, nil
}

// pickDomain returns the first entry of list on domain (any domain when
// domain is ""), detached from the rest, which it frees; nil when none.
func pickDomain(list *C.struct_fi_info, domain string) *C.struct_fi_info {
	var keep, prev *C.struct_fi_info
	for i := list; i != nil; prev, i = i, i.next {
		if domain == "" || C.GoString(C.gofi_domain(i)) == domain {
			keep = i
			break
		}
	}
	if keep == nil {
		if list != nil {
			C.fi_freeinfo(list)
		}
		return nil
	}
	if prev != nil {
		prev.next = keep.next
		keep.next = nil
		C.fi_freeinfo(list)
	} else if keep.next != nil {
		C.fi_freeinfo(keep.next)
		keep.next = nil
	}
	return keep
}

// Info describes the provider, fabric and domain the endpoint was opened on.
func (e *Endpoint) Info() Info { return e.info }

// Name returns the endpoint's address (fi_getname): opaque bytes to publish
// to the peers, which pass them to Insert. For tcp;ofi_rxm it is a
// struct sockaddr_in; for shm a NUL-terminated string.
func (e *Endpoint) Name() ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, e.closedErr("fi_getname")
	}
	var n C.size_t
	ret := C.gofi_getname(e.ep, nil, &n)
	if ret != 0 && ret != -C.FI_ETOOSMALL {
		return nil, fiError(e.prov, "fi_getname", C.ssize_t(ret))
	}
	buf := C.malloc(n + 1)
	defer C.free(buf)
	if ret := C.gofi_getname(e.ep, buf, &n); ret != 0 {
		return nil, fiError(e.prov, "fi_getname", C.ssize_t(ret))
	}
	return C.GoBytes(buf, C.int(n)), nil
}

// Insert adds a peer's Name to the address vector (fi_av_insert) and
// returns the Addr to send to and receive from.
func (e *Endpoint) Insert(name []byte) (Addr, error) {
	if len(name) == 0 {
		return 0, fmt.Errorf("ofi: fi_av_insert(provider %q): empty name", e.prov)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, e.closedErr("fi_av_insert")
	}
	// A copy in C memory, NUL-terminated for string address formats.
	cname := C.calloc(C.size_t(len(name))+1, 1)
	defer C.free(cname)
	copy(unsafe.Slice((*byte)(cname), len(name)), name)
	var a C.fi_addr_t
	ret := C.gofi_av_insert(e.av, cname, &a)
	if ret < 0 {
		return 0, fiError(e.prov, "fi_av_insert", C.ssize_t(ret))
	}
	if ret != 1 {
		return 0, fmt.Errorf("ofi: fi_av_insert(provider %q): address not inserted (%d of 1)", e.prov, int(ret))
	}
	return Addr(a), nil
}

func (e *Endpoint) closedErr(op string) error {
	return fmt.Errorf("ofi: %s(provider %q): %w", op, e.prov, ErrClosed)
}

// MR is a buffer prepared for repeated Send and Recv (see Register).
type MR struct {
	e      *Endpoint
	buf    []byte         // the Go buffer this MR mirrors
	stage  unsafe.Pointer // registered C copy of buf; nil for a no-op MR
	mr     *C.struct_fid_mr
	desc   unsafe.Pointer
	busy   int // Requests in flight using stage (or, external, buf)
	closed bool
	// external: buf is memory outside the Go heap (RegisterExternal), on
	// which sends and receives are posted directly.
	external bool
}

// Register prepares buf for repeated Send and Recv. When the domain needs
// local registration (FI_MR_LOCAL), it allocates a C staging region of
// len(buf) bytes and registers it (fi_mr_reg); Send and Recv on buf or any
// sub-slice of it then copy through that region, at the same offset, with no
// per-message allocation or registration. Otherwise the MR is a no-op, and
// Send and Recv ignore it. The Go buffer itself is never registered: cgo
// forbids C to keep Go pointers. As with real registrations, two operations
// in flight at once must not use overlapping parts of an MR.
func (e *Endpoint) Register(buf []byte) (*MR, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, e.closedErr("fi_mr_reg")
	}
	m := &MR{e: e, buf: buf}
	if !e.mrLocal {
		return m, nil
	}
	m.stage = C.malloc(C.size_t(max(len(buf), 1)))
	if m.stage == nil {
		return nil, fmt.Errorf("ofi: fi_mr_reg(provider %q): malloc(%d) failed", e.prov, len(buf))
	}
	mr, desc, err := e.regLocked(m.stage, max(len(buf), 1))
	if err != nil {
		C.free(m.stage)
		return nil, err
	}
	m.mr, m.desc = mr, desc
	e.mrs[m] = struct{}{}
	return m, nil
}

// RegisterExternal prepares mem, memory outside the Go heap (mmapped, for
// instance from a memfd, or C-allocated), for zero-copy Send and Recv: sends
// and receives of buffers inside mem are posted on mem itself, with no copy
// and no per-message allocation. When the domain needs local registration
// (FI_MR_LOCAL) mem is registered (fi_mr_reg) and its descriptor passed with
// every operation; otherwise the MR is only a record of mem.
//
// mem must not be Go memory (cgo forbids C to keep Go pointers; the garbage
// collector may move or free it) and must stay mapped until the MR is
// closed. While an operation on part of mem is in flight, libfabric reads
// (send) or writes (receive) that part: a send's buffer must stay unchanged
// and a receive's buffer unread until the Request is done.
func (e *Endpoint) RegisterExternal(mem []byte) (*MR, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("ofi: fi_mr_reg(provider %q): empty external memory", e.prov)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, e.closedErr("fi_mr_reg")
	}
	m := &MR{e: e, buf: mem, external: true}
	if !e.mrLocal {
		return m, nil
	}
	mr, desc, err := e.regLocked(unsafe.Pointer(unsafe.SliceData(mem)), len(mem))
	if err != nil {
		return nil, err
	}
	m.mr, m.desc = mr, desc
	e.mrs[m] = struct{}{}
	return m, nil
}

// External reports whether the MR was made by RegisterExternal.
func (m *MR) External() bool { return m != nil && m.external }

func (e *Endpoint) regLocked(p unsafe.Pointer, n int) (*C.struct_fid_mr, unsafe.Pointer, error) {
	var mr *C.struct_fid_mr
	var desc unsafe.Pointer
	key := uint64(0)
	if !e.provKey {
		e.nextKey++
		key = e.nextKey
	}
	if ret := C.gofi_mr_reg(e.domain, p, C.size_t(n), C.uint64_t(key), &mr, &desc); ret != 0 {
		return nil, nil, fiError(e.prov, "fi_mr_reg", C.ssize_t(ret))
	}
	return mr, desc, nil
}

// Close deregisters the MR (fi_close) and frees its staging region. It
// fails while a Request using the MR is in flight. Closing the Endpoint
// closes its MRs; Close after that, or twice, is a no-op.
func (m *MR) Close() error {
	if m == nil {
		return nil
	}
	e := m.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if m.closed {
		return nil
	}
	if m.busy > 0 {
		return fmt.Errorf("ofi: fi_close(mr, provider %q): %d requests in flight use it", e.prov, m.busy)
	}
	return m.closeLocked()
}

func (m *MR) closeLocked() error {
	m.closed = true
	var err error
	if m.mr != nil {
		if ret := C.gofi_close(C.gofi_mr_fid(m.mr)); ret != 0 {
			err = fiError(m.e.prov, "fi_close(mr)", C.ssize_t(ret))
		}
		m.mr = nil
		delete(m.e.mrs, m)
	}
	if m.stage != nil {
		C.free(m.stage)
		m.stage = nil
	}
	return err
}

// Request is a posted Send or Recv. Its results are final once Test
// reports done or Wait returns with the Request complete.
type Request struct {
	e      *Endpoint
	op     string         // "fi_tsend" or "fi_trecv"
	ctx    unsafe.Pointer // C struct fi_context2, the operation context
	cbuf   unsafe.Pointer // where the data lives in C memory
	bounce bool           // cbuf was malloc'ed for this request
	mr     *C.struct_fid_mr
	desc   unsafe.Pointer
	umr    *MR    // the caller's MR whose stage (or external memory) cbuf points into
	dst    []byte // receive destination to copy into; nil for sends and zero-copy receives
	recv   bool
	size   int
	try    func() C.ssize_t // posts it: fi_tsend or fi_trecv

	done bool
	n    int
	err  error
}

// prepare allocates a Request's C memory for buf (using mr's staging region
// when it covers buf) and, for sends, copies buf into it.
func (e *Endpoint) prepare(op string, buf []byte, m *MR, send bool) (*Request, error) {
	r := &Request{e: e, op: op, size: len(buf), recv: !send}
	if !send {
		r.dst = buf
	}
	if m != nil {
		if m.e != e {
			return nil, fmt.Errorf("ofi: %s(provider %q): MR belongs to another endpoint", op, e.prov)
		}
		if m.closed {
			return nil, fmt.Errorf("ofi: %s(provider %q): MR is closed", op, e.prov)
		}
		if m.external && len(buf) > 0 {
			if _, ok := within(m.buf, buf); !ok {
				return nil, fmt.Errorf("ofi: %s(provider %q): buffer is not within the registered external memory", op, e.prov)
			}
			// Zero copy: the operation works on buf itself, which is
			// not Go memory (RegisterExternal).
			r.cbuf = unsafe.Pointer(unsafe.SliceData(buf))
			r.desc = m.desc
			r.umr = m
			r.dst = nil
		} else if m.stage != nil {
			off, ok := within(m.buf, buf)
			if !ok {
				return nil, fmt.Errorf("ofi: %s(provider %q): buffer is not within the registered one", op, e.prov)
			}
			r.cbuf = unsafe.Add(m.stage, off)
			r.desc = m.desc
			r.umr = m
		}
	}
	if r.cbuf == nil {
		r.cbuf = C.malloc(C.size_t(max(len(buf), 1)))
		if r.cbuf == nil {
			return nil, fmt.Errorf("ofi: %s(provider %q): malloc(%d) failed", op, e.prov, len(buf))
		}
		r.bounce = true
		if e.mrLocal {
			mr, desc, err := e.regLocked(r.cbuf, max(len(buf), 1))
			if err != nil {
				C.free(r.cbuf)
				return nil, err
			}
			r.mr, r.desc = mr, desc
		}
	}
	r.ctx = C.calloc(1, C.sizeof_struct_fi_context2)
	if r.ctx == nil {
		r.release()
		return nil, fmt.Errorf("ofi: %s(provider %q): malloc(fi_context2) failed", op, e.prov)
	}
	if send && len(buf) > 0 && (r.umr == nil || !r.umr.external) {
		copy(unsafe.Slice((*byte)(r.cbuf), len(buf)), buf)
	}
	if r.umr != nil {
		r.umr.busy++
	}
	return r, nil
}

// within reports whether sub lies inside whole, and at which offset.
func within(whole, sub []byte) (int, bool) {
	if len(sub) == 0 {
		return 0, true
	}
	if len(whole) == 0 {
		return 0, false
	}
	w := uintptr(unsafe.Pointer(unsafe.SliceData(whole)))
	s := uintptr(unsafe.Pointer(unsafe.SliceData(sub)))
	if s < w || s+uintptr(len(sub)) > w+uintptr(len(whole)) {
		return 0, false
	}
	return int(s - w), true
}

// release frees the Request's C memory and registration. Called with e.mu
// held, once libfabric no longer uses them.
func (r *Request) release() {
	if r.mr != nil {
		C.gofi_close(C.gofi_mr_fid(r.mr))
		r.mr = nil
	}
	if r.bounce && r.cbuf != nil {
		C.free(r.cbuf)
	}
	r.cbuf = nil
	if r.ctx != nil {
		C.free(r.ctx)
		r.ctx = nil
	}
	if r.umr != nil {
		r.umr.busy--
		r.umr = nil
	}
}

// complete finishes r with n bytes or err, copying a receive's data out.
// Called with e.mu held.
func (r *Request) complete(n int, err error) {
	if err == nil && r.dst != nil {
		if n > len(r.dst) { // cannot happen without FI_ETRUNC; be safe
			n = len(r.dst)
		}
		copy(r.dst, unsafe.Slice((*byte)(r.cbuf), n))
	}
	delete(r.e.reqs, uintptr(r.ctx))
	r.release()
	r.done, r.n, r.err = true, n, err
}

// post posts r (try runs its fi_tsend or fi_trecv). On -FI_EAGAIN it
// progresses the completion queue and tries once more; if the provider still
// has no room (with tcp;ofi_rxm, typically while the connection to the peer
// is being set up, which needs the peer's progress too), r is queued and
// Progress posts it later, in order. Operations of one kind queue behind
// each other so that messages are posted in the order they were issued.
// Called with e.mu held.
func (e *Endpoint) post(r *Request, q *[]*Request, try func() C.ssize_t) error {
	r.try = try
	if len(*q) == 0 {
		for attempt := 0; ; attempt++ {
			ret := try()
			if ret == 0 {
				e.reqs[uintptr(r.ctx)] = r
				return nil
			}
			if ret != -C.FI_EAGAIN {
				r.release()
				return fiError(e.prov, r.op, ret)
			}
			if attempt == 1 {
				break
			}
			if _, err := e.progressLocked(); err != nil {
				r.release()
				return err
			}
		}
	}
	*q = append(*q, r)
	e.reqs[uintptr(r.ctx)] = r
	return nil
}

// drainLocked posts queued operations in order until the provider has no
// room; a post that fails for another reason fails its Request.
func (e *Endpoint) drainLocked(q *[]*Request) {
	for len(*q) > 0 {
		r := (*q)[0]
		ret := r.try()
		if ret == -C.FI_EAGAIN {
			return
		}
		(*q)[0] = nil
		*q = (*q)[1:]
		if ret != 0 {
			r.complete(0, fiError(e.prov, r.op, ret))
		}
	}
}

// Send posts a tagged send of buf to peer to (fi_tsend). buf is copied into
// C memory first (the MR's staging region if mr covers it, else a bounce
// buffer), so the caller may reuse buf at once. When the provider has no
// room for it (-FI_EAGAIN), Send progresses the completion queue and retries;
// if there is still none, the send is queued in the endpoint and posted by a
// later Progress (Test, Wait), so Send never blocks. mr may be nil.
func (e *Endpoint) Send(to Addr, tag uint64, buf []byte, mr *MR) (*Request, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, e.closedErr("fi_tsend")
	}
	r, err := e.prepare("fi_tsend", buf, mr, true)
	if err != nil {
		return nil, err
	}
	n := C.size_t(len(buf))
	err = e.post(r, &e.sendq, func() C.ssize_t {
		return C.gofi_tsend(e.ep, r.cbuf, n, r.desc, C.fi_addr_t(to), C.uint64_t(tag), r.ctx)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Recv posts a tagged receive into buf (fi_trecv) of a message with exactly
// this tag, from peer from, or from any peer when from is AddrUnspec (the
// source is only enforced by providers with FI_DIRECTED_RECV; see
// Endpoint.Info). The message lands in C memory and is copied into buf when
// the receive completes: buf must not be used until then. A longer message
// fails the Request with an error wrapping ErrTruncated. Like Send, Recv
// queues the receive when the provider has no room for it. mr may be nil.
func (e *Endpoint) Recv(from Addr, tag uint64, buf []byte, mr *MR) (*Request, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, e.closedErr("fi_trecv")
	}
	r, err := e.prepare("fi_trecv", buf, mr, false)
	if err != nil {
		return nil, err
	}
	src := C.fi_addr_t(from)
	if !e.directed {
		src = C.fi_addr_t(AddrUnspec)
	}
	n := C.size_t(len(buf))
	err = e.post(r, &e.recvq, func() C.ssize_t {
		return C.gofi_trecv(e.ep, r.cbuf, n, r.desc, src, C.uint64_t(tag), r.ctx)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Progress drives the provider and reaps completions (fi_cq_read, in
// batches), completing their Requests; an error completion (-FI_EAVAIL) is
// read with fi_cq_readerr and fails its Request with that error. It then
// posts queued sends and receives that the provider now has room for. It
// returns how many Requests completed. Its error is for the endpoint as a whole
// (ErrClosed, or a failing fi_cq_read), never for one Request.
func (e *Endpoint) Progress() (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.progressLocked()
}

func (e *Endpoint) progressLocked() (int, error) {
	if e.closed {
		return 0, e.closedErr("fi_cq_read")
	}
	n, err := e.reapLocked()
	if err == nil {
		e.drainLocked(&e.sendq)
		e.drainLocked(&e.recvq)
	}
	return n, err
}

// reapLocked reads completions; see Progress.
func (e *Endpoint) reapLocked() (int, error) {
	total := 0
	ents := unsafe.Slice(e.cqbuf, cqBatch)
	for round := 0; round < maxCQRounds; round++ {
		ret := C.gofi_cq_read(e.cq, e.cqbuf)
		switch {
		case ret > 0:
			for i := 0; i < int(ret); i++ {
				if r := e.reqs[uintptr(ents[i].op_context)]; r != nil {
					n := r.size
					if r.recv {
						n = int(ents[i].len)
					}
					r.complete(n, nil)
					total++
				}
			}
			if ret < cqBatch {
				return total, nil
			}
		case ret == -C.FI_EAGAIN:
			return total, nil
		case ret == -C.FI_EAVAIL:
			if rr := C.gofi_cq_readerr(e.cq, e.errEntry, e.errMsg, errMsgLen); rr < 0 {
				return total, fiError(e.prov, "fi_cq_readerr", rr)
			}
			r := e.reqs[uintptr(e.errEntry.op_context)]
			if r == nil {
				continue
			}
			code := int(e.errEntry.err)
			if code < 0 { // shm (1.17) reports negative codes
				code = -code
			}
			msg := C.GoString(C.fi_strerror(C.int(code)))
			if detail := C.GoString(e.errMsg); detail != "" && detail != msg {
				msg += " (provider detail: " + detail + ")"
			}
			err := fmt.Errorf("ofi: %s completion (provider %q, tag %#x, %d bytes): %w", r.op, e.prov,
				uint64(e.errEntry.tag), r.size, &Error{Op: "fi_cq_readerr", Code: code, Msg: msg})
			r.complete(0, err)
			total++
		default:
			return total, fiError(e.prov, "fi_cq_read", ret)
		}
	}
	return total, nil
}

// Test progresses the endpoint once (unless the Request is already done)
// and reports whether the Request is complete, with its byte count (len(buf)
// for sends, the message's length for receives) and error. A non-nil err
// with done false is a failure of the endpoint's progress, not of r.
func (r *Request) Test() (done bool, n int, err error) {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if !r.done {
		if _, err := e.progressLocked(); err != nil && !r.done {
			return false, 0, err
		}
	}
	if !r.done {
		return false, 0, nil
	}
	return true, r.n, r.err
}

// Status reports, without progressing the endpoint, whether the Request is
// complete, with Test's n and err.
func (r *Request) Status() (done bool, n int, err error) {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	return r.done, r.n, r.err
}

// Cancel asks the provider to cancel the Request (fi_cancel). A cancelled
// Request completes, at a later Progress, with an error wrapping an *Error
// whose Code is ECANCELED; one the provider has already started (a matched
// receive, a send on the wire) may complete normally instead. A Request
// still queued in the endpoint (not posted yet) is removed and completes at
// once. Cancel of a done Request does nothing.
func (r *Request) Cancel() error {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.done || e.closed {
		return nil
	}
	for _, q := range []*[]*Request{&e.sendq, &e.recvq} {
		for i, x := range *q {
			if x == r {
				*q = append((*q)[:i], (*q)[i+1:]...)
				r.complete(0, fmt.Errorf("ofi: %s(provider %q): %w", r.op, e.prov,
					&Error{Op: "fi_cancel", Code: int(C.FI_ECANCELED), Msg: C.GoString(C.fi_strerror(C.FI_ECANCELED))}))
				return nil
			}
		}
	}
	if ret := C.gofi_cancel(e.ep, r.ctx); ret != 0 && ret != -C.FI_ENOENT {
		return fiError(e.prov, "fi_cancel", C.ssize_t(ret))
	}
	return nil
}

// Wait progresses the endpoint until the Request completes, yielding
// (runtime.Gosched) between polls, and returns Test's n and err. When ctx
// ends first it returns ctx.Err(); the Request then stays posted, and its
// C memory is reclaimed when it completes or by Close.
func (r *Request) Wait(ctx context.Context) (int, error) {
	for {
		done, n, err := r.Test()
		if done || err != nil {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		runtime.Gosched()
	}
}

// Close closes the endpoint, address vector, completion queue, domain and
// fabric, in this order (and MRs before the domain). Requests in flight
// complete with an error wrapping ErrClosed, and all C memory is freed.
// Close is idempotent; it returns the first fi_close error.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	var first error
	closeFid := func(what string, f *C.struct_fid) {
		if f == nil {
			return
		}
		if ret := C.gofi_close(f); ret != 0 && first == nil {
			first = fiError(e.prov, "fi_close("+what+")", C.ssize_t(ret))
		}
	}
	// After the endpoint is closed, the provider no longer touches the
	// Requests' buffers and contexts.
	closeFid("ep", C.gofi_ep_fid(e.ep))
	e.ep = nil
	for _, r := range e.reqs {
		r.complete(0, e.closedErr(r.op))
	}
	e.sendq, e.recvq = nil, nil
	for m := range e.mrs {
		if err := m.closeLocked(); err != nil && first == nil {
			first = err
		}
	}
	closeFid("av", C.gofi_av_fid(e.av))
	e.av = nil
	closeFid("cq", C.gofi_cq_fid(e.cq))
	e.cq = nil
	closeFid("domain", C.gofi_domain_fid(e.domain))
	e.domain = nil
	closeFid("fabric", C.gofi_fabric_fid(e.fabric))
	e.fabric = nil
	C.fi_freeinfo(e.fi)
	e.fi = nil
	C.free(unsafe.Pointer(e.cqbuf))
	C.free(unsafe.Pointer(e.errEntry))
	C.free(unsafe.Pointer(e.errMsg))
	e.cqbuf, e.errEntry, e.errMsg = nil, nil, nil
	return first
}
