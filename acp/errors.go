package acp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/sourcegraph/jsonrpc2"
)

// Sentinel errors callers branch on.
var (
	// ErrClosed: the Conn was closed by the broker.
	ErrClosed = errors.New("connection closed")
	// ErrAgentGone: the agent's output ended (exit, crash, closed stdout).
	ErrAgentGone = errors.New("agent closed its output")
	// ErrAbandoned: the broker gave up on the call; its answer will be dropped.
	ErrAbandoned = errors.New("request abandoned")
	// ErrProtocolVersion: the agent answered initialize with another version.
	ErrProtocolVersion = errors.New("agent speaks an unsupported protocol version")
	// ErrAuthRequired: the agent requires authentication and no usable
	// method is configured.
	ErrAuthRequired = errors.New("agent requires authentication")
	// ErrOutsideRoot: a file path resolves outside the session's directory.
	ErrOutsideRoot = errors.New("path is outside the session's working directory")
	// ErrUnknownSession: a request named a session this Conn did not create.
	ErrUnknownSession = errors.New("unknown session")
	// ErrBusy: the session already has a subscriber (a turn in progress).
	ErrBusy = errors.New("session already has a turn in progress")
	// ErrUnreadableAnswer: the agent's answer to a call could not be read
	// (not JSON the broker can decode, or longer than a line may be).
	ErrUnreadableAnswer = errors.New("the agent's answer could not be read")
)

// pathEscapes is os.Root's refusal of a path that leads out of its root,
// by "..", an absolute path or a symbolic link. The os package keeps that
// error to itself, so it is learned once from the refusal of an absolute
// path, which os.Root gives before it looks at the file system.
var pathEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot("/")
	if err != nil {
		return nil
	}
	defer r.Close()
	_, err = r.Lstat("/")
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return nil
})

// IsPathEscape reports whether err is an os.Root refusing a path that
// leads out of its root. Were the refusal not learned, it reports false,
// and the path is still refused, only with a vaguer reason.
func IsPathEscape(err error) bool {
	e := pathEscapes()
	return e != nil && errors.Is(err, e)
}

// JSON-RPC and ACP error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	CodeCancelled      = -32800
	CodeAuthRequired   = -32000
	CodeNotFound       = -32002
)

// RPCError is an error answer from the agent.
type RPCError struct {
	Code    int64
	Message string
	Method  string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s: agent error %d: %s", e.Method, e.Code, e.Message)
}

// wireError maps a Go error to the JSON-RPC error sent to the agent. It is
// the one place where that mapping lives.
func wireError(err error) *jsonrpc2.Error {
	code := int64(CodeInternalError)
	switch {
	case errors.Is(err, ErrOutsideRoot), errors.Is(err, ErrUnknownSession), errors.Is(err, ErrInvalidParams):
		code = CodeInvalidParams
	case errors.Is(err, errBatch), errors.Is(err, errInvalidID), errors.Is(err, errInvalidReqt):
		code = CodeInvalidRequest
	case errors.Is(err, fs.ErrNotExist):
		code = CodeNotFound
	case errors.Is(err, ErrMethodNotFound):
		code = CodeMethodNotFound
	case errors.Is(err, ErrRequestCancelled):
		code = CodeCancelled
	}
	return &jsonrpc2.Error{Code: code, Message: err.Error()}
}

// Errors a Host answers with, whose code the agent is told.
var (
	// ErrInvalidParams: what a request asks cannot be done as asked
	// (-32602).
	ErrInvalidParams = errors.New("invalid params")
	// ErrMethodNotFound: the request is not served (-32601).
	ErrMethodNotFound = errors.New("method not found")
)

// ParamsError returns an error whose text is msg and that is answered as
// invalid params (-32602), as ErrInvalidParams is: a Host's sentinels for
// the ways a request can ask what it may not.
func ParamsError(msg string) error { return paramsError(msg) }

type paramsError string

func (e paramsError) Error() string        { return string(e) }
func (e paramsError) Is(target error) bool { return target == ErrInvalidParams }

var (
	errTooMany     = errors.New("too many requests in flight")
	errBatch       = errors.New("batch requests are not supported: send one message per line")
	errInvalidID   = errors.New("the request's id is not a string or a whole number from 0")
	errInvalidReqt = errors.New("invalid request")
)
