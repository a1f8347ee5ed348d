package scrape

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"unicode/utf8"
)

// Reasons returned by Reason. They are meant as metric label values, so the
// set is small and fixed.
const (
	ReasonTimeout    = "timeout"
	ReasonConnect    = "connect"
	ReasonHTTPStatus = "http_status"
	ReasonTooLarge   = "too_large"
	ReasonParse      = "parse"
	ReasonCanceled   = "canceled"
	ReasonOther      = "other"
	// ReasonRedirect is a 3xx answer: redirects are never followed, so a
	// target cannot send the scraper to another host.
	ReasonRedirect = "redirect"
	// ReasonLimit is an exposition over one of the Limits, or one whose
	// parsed size the in-flight budget could not cover.
	ReasonLimit = "limit"
	// ReasonCycleDeadline is a target a Cycle's deadline (or its
	// context's) left unscraped or cut short: it says nothing about the
	// target itself.
	ReasonCycleDeadline = "cycle_deadline"
)

// ErrTooLarge is wrapped by scrape errors whose response body, after
// decompression, exceeds Config.MaxBytes.
var ErrTooLarge = errors.New("response body too large")

// StatusError is wrapped by scrape errors for non-2xx responses.
type StatusError struct {
	Code int
}

// Error implements error.
func (e *StatusError) Error() string {
	if isRedirect(e.Code) {
		return fmt.Sprintf("HTTP status %d: redirects are not followed", e.Code)
	}
	return fmt.Sprintf("unexpected HTTP status %d", e.Code)
}

func isRedirect(code int) bool { return code >= 300 && code <= 399 }

// errCredentials refuses a URL with userinfo: the scraper never sends
// credentials to a target, whose address a tenant chose.
var errCredentials = errors.New("URL carries credentials (user:password@); refused")

// scrapeError is what Scrape returns and Result.Err carries: the (redacted)
// target URL, the cause, and the reason decided when the scrape failed.
type scrapeError struct {
	url    string
	reason string
	err    error
}

func (e *scrapeError) Error() string {
	return "scrape " + e.url + ": " + e.err.Error()
}

func (e *scrapeError) Unwrap() error { return e.err }

// Reason maps err to one of the Reason* constants, for use as a metric label.
// It returns "" for a nil error. Errors that did not come from this package
// are classified by their cause (context, net), falling back to "other".
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var se *scrapeError
	if errors.As(err, &se) && se.reason != "" {
		return se.reason
	}
	return classify(err)
}

// classify derives a reason from an error's cause alone.
func classify(err error) string {
	var (
		status *StatusError
		perr   *parseError
		nerr   net.Error
		operr  *net.OpError
		dnserr *net.DNSError
	)
	switch {
	case errors.Is(err, ErrLimit):
		return ReasonLimit
	case errors.Is(err, ErrTooLarge):
		return ReasonTooLarge
	case errors.As(err, &status) && isRedirect(status.Code):
		return ReasonRedirect
	case errors.As(err, &status):
		return ReasonHTTPStatus
	case errors.As(err, &perr):
		return ReasonParse
	case errors.Is(err, context.Canceled):
		return ReasonCanceled
	case errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return ReasonTimeout
	case errors.As(err, &operr) && operr.Op == "dial",
		errors.As(err, &dnserr):
		return ReasonConnect
	default:
		return ReasonOther
	}
}

// newError wraps cause with the target URL and a reason. parent is the
// caller's context and attempt the per-target one derived from it: which of
// them ended tells a caller's cancellation from the target's own timeout,
// whatever error text the transport chose to report.
func newError(parent, attempt context.Context, url string, cause error) *scrapeError {
	reason := classify(cause)
	switch reason {
	case ReasonTooLarge, ReasonLimit, ReasonHTTPStatus, ReasonRedirect, ReasonParse:
		// The body was judged on its merits; a deadline racing with
		// that judgement does not change it.
	default:
		switch {
		case errors.Is(parent.Err(), context.DeadlineExceeded):
			reason = ReasonCycleDeadline
		case parent.Err() != nil:
			reason = ReasonCanceled
		case errors.Is(attempt.Err(), context.DeadlineExceeded):
			reason = ReasonTimeout
		}
	}
	return &scrapeError{url: url, reason: reason, err: cause}
}

// parseError reports an exposition the decoder rejected. Parser messages
// quote the input they choke on, which is the target's to choose: it could
// smuggle text into logs or make them huge. Quoted input is replaced by
// <redacted>; line numbers and what was expected stay.
type parseError struct {
	format string
	err    error
}

// maxParseMsg bounds the part of a parser message kept in an error string.
const maxParseMsg = 256

func (e *parseError) Error() string {
	msg := redactQuoted(e.err.Error())
	if len(msg) > maxParseMsg {
		n := maxParseMsg
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n] + "...(truncated)"
	}
	return "parse " + e.format + ": " + msg
}

func (e *parseError) Unwrap() error { return e.err }

// redactQuoted replaces every double- or single-quoted string of msg (as
// %q writes them, escapes included) with a placeholder. An unterminated
// quote redacts the rest of msg.
func redactQuoted(msg string) string {
	if !strings.ContainsAny(msg, `"'`) {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		q := msg[i]
		if q != '"' && q != '\'' {
			b.WriteByte(q)
			continue
		}
		j := i + 1
		for j < len(msg) && msg[j] != q {
			if msg[j] == '\\' {
				j++
			}
			j++
		}
		b.WriteString("<redacted>")
		i = j
	}
	return b.String()
}
