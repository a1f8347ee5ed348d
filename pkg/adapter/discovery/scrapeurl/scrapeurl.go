// Package scrapeurl turns what a tenant writes in a pod's annotations (a
// port, a path, a scheme) and the pod's IP into the URL the adapter
// scrapes, and refuses anything that would make that URL point elsewhere.
// It depends on nothing but the standard library, so that its fuzz target
// instruments little besides it.
package scrapeurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// Field names the annotation an error is about.
type Field string

// The fields a scrape URL is built from.
const (
	FieldPort   Field = "port"
	FieldPath   Field = "path"
	FieldScheme Field = "scheme"
)

// FieldError is a refused annotation value.
type FieldError struct {
	Field Field
	Err   error
}

func (e *FieldError) Error() string { return string(e.Field) + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Build returns the URL to scrape a pod at ip: scheme (http when empty,
// else http or https), the annotated port (else the first of
// containerPorts in range), and path (/metrics when empty; a leading / is
// added). A refused annotation is a *FieldError.
func Build(port, path, scheme, ip string, containerPorts []int32) (string, error) {
	p, err := Port(port, containerPorts)
	if err != nil {
		return "", &FieldError{FieldPort, err}
	}
	if scheme == "" {
		scheme = "http"
	}
	if scheme != "http" && scheme != "https" {
		return "", &FieldError{FieldScheme, fmt.Errorf("%q is neither http nor https", scheme)}
	}
	if path == "" {
		path = "/metrics"
	}
	if path[0] != '/' {
		path = "/" + path
	}
	if err := CheckPath(path); err != nil {
		return "", &FieldError{FieldPath, err}
	}
	return URL(scheme, ip, p, path)
}

// Port is the annotated port, else the first container port in range.
func Port(annotated string, containerPorts []int32) (int, error) {
	if annotated != "" {
		port, err := strconv.Atoi(annotated)
		if err != nil || port < 1 || port > 65535 {
			return 0, fmt.Errorf("%q is not a port number", annotated)
		}
		return port, nil
	}
	for _, cp := range containerPorts {
		if cp > 0 && cp <= 65535 {
			return int(cp), nil
		}
	}
	return 0, errors.New("no port annotation and no container port declared")
}

// MaxPathLen bounds an annotated path: each target keeps its URL for as
// long as the pod lives, and no metrics path is longer.
const MaxPathLen = 256

// CheckPath accepts an absolute URL path of letters, digits, "-._~/",
// the sub-delimiters "!$&'()*+,;=", ":" and %-escapes: it is appended to
// scheme://ip:port, so anything that would end the path ("?", "#"), begin
// an authority ("//", "@", "\"), or break the request line (spaces,
// control characters) is refused rather than escaped.
func CheckPath(path string) error {
	switch {
	case path == "" || path[0] != '/':
		return fmt.Errorf("path %q does not start with /", path)
	case len(path) > MaxPathLen:
		return fmt.Errorf("path is %d bytes, more than %d", len(path), MaxPathLen)
	case len(path) > 1 && path[1] == '/':
		return fmt.Errorf("path %q starts with //", path)
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '%':
			if i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2]) {
				return fmt.Errorf("path %q has a %% that is no escape", path)
			}
			i += 2
		case isPathPunct(c):
		default:
			return fmt.Errorf("path %q contains %q", path, c)
		}
	}
	return nil
}

func isPathPunct(c byte) bool {
	switch c {
	case '-', '.', '_', '~', '/', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':':
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// URL builds the URL and checks that it says what it was built from: the
// pod's IP and port as host, no user, the path whole.
func URL(scheme, ip string, port int, path string) (string, error) {
	if net.ParseIP(ip) == nil {
		return "", fmt.Errorf("pod IP %q is not an IP address", ip)
	}
	s := scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(port)) + path
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", s, err)
	}
	if u.Hostname() != ip || u.Port() != strconv.Itoa(port) || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Path == "" {
		return "", fmt.Errorf("endpoint %q does not parse back to the pod's own address", s)
	}
	return s, nil
}
