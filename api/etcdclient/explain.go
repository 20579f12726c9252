package etcdclient

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Class is the kind of an etcd failure, the label of
// sluice_etcd_errors_total and the last_error_class of status documents.
type Class string

// The classes.
const (
	ClassUnreachable Class = "unreachable" // refused, reset, no route
	ClassDNS         Class = "dns"         // the endpoint's name does not resolve
	ClassTLS         Class = "tls"         // handshake or certificate
	ClassAuth        Class = "auth"        // wrong password, no user, token rejected
	ClassPermission  Class = "permission"  // the user's role does not allow the key
	ClassTimeout     Class = "timeout"     // no answer in time, cause unknown
	ClassNoSpace     Class = "nospace"     // the etcd quota is reached
	ClassOther       Class = "other"
)

// Classes lists every class (metric label values).
var Classes = []Class{ClassUnreachable, ClassDNS, ClassTLS, ClassAuth, ClassPermission, ClassTimeout, ClassNoSpace, ClassOther}

// Error is an etcd failure said for a person: "etcd 127.0.0.1:2379:
// authentication failed for user sluice".
type Error struct {
	// Op is what the caller was doing when err is wrapped ("read snapshot
	// pointers" of "read snapshot pointers: context deadline exceeded"),
	// said first.
	Op string
	// Endpoint is the endpoint the failure names (the dialled address when
	// the error says, else the configured endpoints).
	Endpoint string
	Class    Class
	// Cause is the sentence after the endpoint.
	Cause string
	Err   error
}

func (e *Error) Error() string {
	s := "etcd " + e.Endpoint + ": " + e.Cause
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	return s
}
func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns err's class ("" for nil, a cancelled context or an error
// that is not an etcd failure).
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	_, c := classify(err)
	return c
}

var (
	dialAddr   = regexp.MustCompile(`dial tcp ([^\s"]+?):? (?:connect|i/o|lookup|read|write)`)
	lookupHost = regexp.MustCompile(`lookup ([^\s:"]+)`)
)

// explain says err for a person; known, when not nil, is an earlier
// attempt's error that explains a bare timeout.
func explain(err, known error, endpoints []string, user, key string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	cause, class := classify(err)
	if class == "" {
		return err
	}
	detail := err
	if class == ClassTimeout && known != nil && !dialAddr.MatchString(err.Error()) {
		if kc, kclass := classify(known); kclass != "" {
			cause, class, detail = kc, kclass, known
		}
	}
	switch class {
	case ClassAuth:
		switch {
		case strings.HasPrefix(cause, "authentication failed") && user != "":
			cause += " for user " + user
		case strings.HasPrefix(cause, "auth token"):
			if user != "" {
				cause += " (user " + user + ")"
			}
		}
	case ClassPermission:
		if key != "" {
			cause += " on " + key
		}
		if user != "" {
			cause += " for user " + user
		}
	}
	ep := strings.Join(endpoints, ",")
	if m := dialAddr.FindStringSubmatch(detail.Error()); m != nil {
		ep = m[1]
	}
	return &Error{Op: op(err), Endpoint: ep, Class: class, Cause: cause, Err: err}
}

// op is the text the wrappers of err put before its innermost error.
func op(err error) string {
	inner := err
	for u := errors.Unwrap(inner); u != nil; u = errors.Unwrap(inner) {
		inner = u
	}
	outer, in := err.Error(), inner.Error()
	if inner == err || !strings.HasSuffix(outer, ": "+in) {
		return ""
	}
	return strings.TrimSuffix(outer, ": "+in)
}

// classify names the cause and class of err; class "" means err is not
// etcd's failure (the caller's own context was cancelled, or err is the
// caller's own error).
func classify(err error) (string, Class) {
	if err == nil || errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return "", ""
	}
	switch {
	case isEtcd(err, rpctypes.ErrAuthFailed):
		return "authentication failed (wrong user or password)", ClassAuth
	case isEtcd(err, rpctypes.ErrUserEmpty):
		return "authentication required: etcd has auth enabled and no user was given", ClassAuth
	case isEtcd(err, rpctypes.ErrInvalidAuthToken):
		return "auth token rejected (invalid auth token)", ClassAuth
	case isEtcd(err, rpctypes.ErrPermissionDenied):
		return "permission denied", ClassPermission
	case isEtcd(err, rpctypes.ErrNoSpace):
		return "database space exceeded (the etcd quota is reached: compact and defragment etcd)", ClassNoSpace
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "x509: "):
		return "TLS: " + upTo(msg[strings.Index(msg, "x509: "):]), ClassTLS
	case strings.Contains(msg, "tls: "):
		return "TLS handshake failed: " + upTo(msg[strings.Index(msg, "tls: "):]), ClassTLS
	case strings.Contains(msg, "server preface"), strings.Contains(msg, "http2: frame too large"):
		return "not a gRPC answer (does the endpoint need https:// and a CA?)", ClassTLS
	case strings.Contains(msg, "no such host"), strings.Contains(msg, "server misbehaving"):
		host := ""
		if m := lookupHost.FindStringSubmatch(msg); m != nil {
			host = m[1] + ": "
		}
		return "unreachable (DNS: " + host + "no such host)", ClassDNS
	case strings.Contains(msg, "connection refused"):
		return "unreachable (connection refused)", ClassUnreachable
	case strings.Contains(msg, "connection reset"):
		return "unreachable (connection reset)", ClassUnreachable
	case strings.Contains(msg, "no route to host"), strings.Contains(msg, "network is unreachable"):
		return "unreachable (no route to host)", ClassUnreachable
	case strings.Contains(msg, "i/o timeout"):
		return "unreachable (connect: i/o timeout)", ClassTimeout
	case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
		return "no answer in time (context deadline exceeded)", ClassTimeout
	case status.Code(err) == codes.Unavailable:
		return "unreachable (" + statusDesc(err) + ")", ClassUnreachable
	}
	var se interface{ GRPCStatus() *status.Status }
	var ee rpctypes.EtcdError
	if errors.As(err, &se) || errors.As(err, &ee) {
		return statusDesc(err), ClassOther
	}
	return "", "" // not an etcd failure (the caller's own error)
}

// isEtcd reports whether err is, wraps, or wraps the gRPC status of the
// etcd error target.
func isEtcd(err, target error) bool {
	if errors.Is(err, target) || errors.Is(rpctypes.Error(err), target) {
		return true
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return errors.Is(rpctypes.Error(se.GRPCStatus().Err()), target)
	}
	return false
}

// upTo cuts s at the end of the quoted gRPC description it is part of.
func upTo(s string) string {
	if i := strings.IndexAny(s, "\"\\\n"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, " (possibly"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func statusDesc(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}
