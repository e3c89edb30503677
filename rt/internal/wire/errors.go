// Package wire holds the protobuf envelopes that nodes exchange (wire.proto and its generated
// Go) and the mapping of the sdk's errors to wire codes and back: an error crosses the wire as
// a code and comes back as the same sentinel, with its message.
package wire

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/zlink-go/zlink/sdk"
)

var codes = []struct {
	code Code
	err  error
}{
	{Code_CODE_NOT_FOUND, sdk.ErrNotFound},
	{Code_CODE_ALREADY_EXISTS, sdk.ErrAlreadyExists},
	{Code_CODE_STALE_ROUTE, sdk.ErrStaleRoute},
	{Code_CODE_OWNER_UNAVAILABLE, sdk.ErrOwnerUnavailable},
	{Code_CODE_QUEUE_FULL, sdk.ErrQueueFull},
	{Code_CODE_INBOUND_BUDGET, sdk.ErrInboundBudget},
	{Code_CODE_CAPACITY_EXCEEDED, sdk.ErrCapacityExceeded},
	{Code_CODE_NOT_SERVING, sdk.ErrNotServing},
	{Code_CODE_UNHANDLED, sdk.ErrUnhandled},
	{Code_CODE_CLOSED, sdk.ErrClosed},
	{Code_CODE_MESSAGE_TOO_LARGE, sdk.ErrMessageTooLarge},
	{Code_CODE_CREATION_FAILED, sdk.ErrCreationFailed},
	{Code_CODE_HANDLER_PANICKED, sdk.ErrHandlerPanicked},
	{Code_CODE_INVALID_ARGUMENT, sdk.ErrInvalidArgument},
	{Code_CODE_INVALID_ID, sdk.ErrInvalidID},
	{Code_CODE_UNSUPPORTED, sdk.ErrUnsupported},
	{Code_CODE_NO_READY_TARGET, sdk.ErrNoReadyTarget},
	// Before the context codes: a store that timed out is reported as the store's failure.
	{Code_CODE_STORE_UNAVAILABLE, sdk.ErrStoreUnavailable},
	{Code_CODE_CANCELED, context.Canceled},
	{Code_CODE_DEADLINE_EXCEEDED, context.DeadlineExceeded},
}

// EncodeError turns err into its wire form. Runtime errors keep their sentinel as a code; an
// *sdk.AppError keeps its code and message; any other error is an application error with the
// error's text as its message. Texts longer than their limits are cut (MaxErrorMessageBytes).
func EncodeError(err error) *Error {
	if err == nil {
		return nil
	}
	return encodeError(err).validUTF8().bounded()
}

// The most bytes of an error's texts that cross the wire: its message, and its application
// code and queue name each. A reply has bounded room beyond its payload, and one that did not
// fit would fail its connection and every call on it rather than its own call.
const (
	MaxErrorMessageBytes = 16 << 10
	MaxErrorCodeBytes    = 1 << 10
)

// bounded cuts e's texts to their limits.
func (e *Error) bounded() *Error {
	e.Message = cut(e.Message, MaxErrorMessageBytes)
	e.AppCode = cut(e.AppCode, MaxErrorCodeBytes)
	e.QueueWhere = cut(e.QueueWhere, MaxErrorCodeBytes)
	return e
}

// cut returns s if it holds at most limit bytes, and otherwise its beginning, cut at a rune's
// start, and a note of its length, in limit bytes at most.
func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	note := "… (" + strconv.Itoa(len(s)) + " bytes, cut)"
	n := limit - len(note)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + note
}

func encodeError(err error) *Error {
	out := &Error{Message: err.Error()}
	var qf *sdk.QueueFullError
	var ce *sdk.CapacityError
	var ae *sdk.AppError
	switch {
	case errors.As(err, &qf):
		out.Code, out.Lane, out.Axis = Code_CODE_QUEUE_FULL, uint32(qf.Lane), uint32(qf.Axis)
		out.Limit, out.Queued, out.Requested, out.QueueWhere = qf.Limit, qf.Queued, qf.Requested, qf.Where
		return out
	case errors.As(err, &ce):
		out.Code, out.Where, out.Limit = Code_CODE_CAPACITY_EXCEEDED, uint32(ce.Where), ce.Limit
		return out
	case errors.As(err, &ae):
		out.Code, out.AppCode, out.Message = Code_CODE_APPLICATION, ae.Code, ae.Message
		return out
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			out.Code = c.code
			return out
		}
	}
	out.Code = Code_CODE_APPLICATION
	return out
}

// DecodeError turns a wire error back into an error that matches the same sentinel (or
// *sdk.AppError, *sdk.QueueFullError, *sdk.CapacityError) and carries the remote message.
func DecodeError(e *Error) error {
	if e == nil {
		return nil
	}
	switch e.Code {
	case Code_CODE_APPLICATION:
		return &sdk.AppError{Code: e.AppCode, Message: e.Message}
	case Code_CODE_QUEUE_FULL:
		return &sdk.QueueFullError{Lane: sdk.Lane(e.Lane), Axis: sdk.Axis(e.Axis), Limit: e.Limit, Queued: e.Queued, Requested: e.Requested, Where: e.QueueWhere}
	case Code_CODE_CAPACITY_EXCEEDED:
		return &sdk.CapacityError{Where: sdk.CapacityWhere(e.Where), Limit: e.Limit}
	}
	for _, c := range codes {
		if c.code == e.Code {
			return &RemoteError{sentinel: c.err, msg: e.Message}
		}
	}
	return &RemoteError{sentinel: errInternal, msg: e.Message}
}

var errInternal = errors.New("zlink: internal error")

// RemoteError is a runtime error that came over the wire: it matches its sentinel with
// errors.Is and reads as the remote side's message.
type RemoteError struct {
	sentinel error
	msg      string
}

func (e *RemoteError) Error() string { return e.msg }

// Unwrap returns the sentinel.
func (e *RemoteError) Unwrap() error { return e.sentinel }

// CodeOf is the code err crosses the wire with, found without building its message: nil is
// CODE_UNSPECIFIED. Telemetry uses it as the error's class.
func CodeOf(err error) Code {
	if err == nil {
		return Code_CODE_UNSPECIFIED
	}
	var qf *sdk.QueueFullError
	var ce *sdk.CapacityError
	var ae *sdk.AppError
	switch {
	case errors.As(err, &qf):
		return Code_CODE_QUEUE_FULL
	case errors.As(err, &ce):
		return Code_CODE_CAPACITY_EXCEEDED
	case errors.As(err, &ae):
		return Code_CODE_APPLICATION
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return Code_CODE_APPLICATION
}

// HandlerError is how a handler's error reaches the caller: always as an *sdk.AppError, never
// as one of the runtime's sentinels, which a handler may have got from a call of its own. The
// runtime never acts on it — no retry, no redirect (C3) — and neither is a caller misled into
// reading it as the runtime's answer about its own call.
func HandlerError(err error) error {
	if ae, ok := err.(*sdk.AppError); ok {
		return ae
	}
	out := &sdk.AppError{Message: err.Error()}
	var ae *sdk.AppError
	if errors.As(err, &ae) {
		out.Code = ae.Code
	}
	return out
}

// validUTF8 replaces what is not UTF-8 in e's texts: protobuf's string fields carry UTF-8 only,
// and an error's text may come from anywhere.
func (e *Error) validUTF8() *Error {
	for _, f := range []*string{&e.Message, &e.AppCode, &e.QueueWhere} {
		if !utf8.ValidString(*f) {
			*f = strings.ToValidUTF8(*f, "\uFFFD")
		}
	}
	return e
}
