package fence

import "sync/atomic"

// UploadState is how much of a forwarded write's body went to the backend,
// as the barrier sees it.
type UploadState int32

const (
	// Sending: the body is still being handed to the backend; a larger
	// token's raise may cut it off.
	Sending UploadState = iota
	// Sent: the whole body was handed over (or there is none): the backend
	// may apply the write, which can no longer be recalled.
	Sent
	// Cut: a larger token cut the upload off before its end: the backend
	// never gets the body whole and cannot apply it.
	Cut
)

// Upload is the body of one fenced write, as the barrier sees it. The zero
// value is an upload still sending; a write without a body calls NoBody
// before Admit. Only the barrier cuts an upload; the body's reader calls Send
// when its last bytes go to the backend.
type Upload struct {
	token     uint64 // set by Admit
	tree      bool   // set by AdmitCollections: its writes on names without "/" are collection writes too
	state     atomic.Int32
	abandoned atomic.Bool
	cutBy     atomic.Pointer[StaleError] // the fence whose raise cut it

	// Interrupt, when set before Admit, is called once when the upload is
	// cut off, to unblock a read of the body in progress (a read deadline in
	// the past). nil: nothing to unblock.
	Interrupt func()
}

// NoBody marks a write without a body: nothing to cut, it is sent whole as
// soon as it is forwarded.
func (u *Upload) NoBody() { u.state.Store(int32(Sent)) }

// Send records that the body's last bytes are handed to the backend now,
// unless a larger token cut the upload off before; it reports whether they
// may be sent. From a true answer on, the backend may apply the write.
func (u *Upload) Send() bool {
	return u.state.CompareAndSwap(int32(Sending), int32(Sent)) || UploadState(u.state.Load()) == Sent
}

// State returns how far the upload got.
func (u *Upload) State() UploadState { return UploadState(u.state.Load()) }

// Abandon records that the proxy gave up on the exchange after the whole
// body was sent (a timeout, a connection lost after sending): a slow backend
// may still apply it, so its release holds the barrier for the abandon grace.
func (u *Upload) Abandon() { u.abandoned.Store(true) }

// CutBy returns the refusal of a cut upload: the fence whose raise cut it
// off (the write's own resource, or a prefix fence above or below one) and
// its maximum then, with the upload's token. nil when it was not cut.
func (u *Upload) CutBy() *StaleError {
	if u.State() != Cut {
		return nil
	}
	return u.cutBy.Load()
}

// cut stops an upload that has not handed its whole body over, for the
// raise of fence by to m; it reports whether it did. A sent body cannot be
// recalled.
func (u *Upload) cut(by string, m uint64) bool {
	if u.State() != Sending {
		return false
	}
	// Before the state: whoever sees Cut sees a cutter (any one of
	// several racing: each one's fence refuses the upload).
	u.cutBy.Store(&StaleError{Resource: by, Token: u.token, Current: m})
	if !u.state.CompareAndSwap(int32(Sending), int32(Cut)) {
		return false
	}
	if u.Interrupt != nil {
		u.Interrupt()
	}
	return true
}
