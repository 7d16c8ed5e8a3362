package wire

import (
	"errors"
	"log/slog"
	"strconv"
	"time"
)

// Answer is one row of an error-to-answer table (Answers): the problem and
// log level of the errors that match Err (errors.Is).
type Answer struct {
	Err    error // nil only in a table's last row, which takes any error
	Status int
	Reason string // the problem's "reason", a Reason* value
	Title  string
	// Detail, when set, is the problem's detail instead of the error's
	// text, which may carry internals (the log has them).
	Detail string
	// Hide keeps the error's text out of the problem when Detail is empty:
	// the problem then has no detail.
	Hide  bool
	Retry bool       // the answer carries Retry-After (RetryAfter of the error)
	Level slog.Level // of the log line
}

// Answers maps errors to answers: the first row whose Err matches wins, so
// errors that wrap a cause come before the cause. Its last row, whose Err
// is nil, takes any error. The proxy and the control API each have one.
type Answers []Answer

// Find returns the row of the first of errs (nil ones skipped) that a row
// matches: for each error in turn, the first row that matches it; else the
// last row.
func (t Answers) Find(errs ...error) Answer {
	for _, err := range errs {
		if err == nil {
			continue
		}
		for _, a := range t[:len(t)-1] {
			if errors.Is(err, a.Err) {
				return a
			}
		}
	}
	return t[len(t)-1]
}

// Problem returns the problem of a for err: its status, reason and title,
// and Detail, or else err's text unless Hide.
func (a Answer) Problem(err error) Problem {
	p := Problem{Status: a.Status, Reason: a.Reason, Title: a.Title, Detail: a.Detail}
	if p.Detail == "" && !a.Hide {
		p.Detail = err.Error()
	}
	return p
}

// RetryAfterer is an error that knows when to retry: cluster mode knows
// when a shard's lock-delay ends. RetryAfter reads it from an error chain.
type RetryAfterer interface {
	RetryAfter() time.Duration
}

// RetryAfter is the Retry-After value (whole seconds) of a 503 refusal for
// err: what a RetryAfterer in its chain says, rounded up, at least 1; else
// 1.
func RetryAfter(err error) string {
	var ra RetryAfterer
	if errors.As(err, &ra) {
		if d := ra.RetryAfter(); d > time.Second {
			return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
		}
	}
	return "1"
}
