package scrapeurl

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		port, path, scheme, ip string
		ports                  []int32
		want                   string
		field                  Field // the refused field, "" when accepted
	}{
		{name: "defaults", ip: "10.0.0.7", ports: []int32{8000}, want: "http://10.0.0.7:8000/metrics"},
		{name: "annotated", port: "9090", path: "stats", scheme: "https", ip: "10.0.0.7", want: "https://10.0.0.7:9090/stats"},
		{name: "IPv6", port: "80", ip: "fd00::7", want: "http://[fd00::7]:80/metrics"},
		{name: "first port in range", ip: "10.0.0.7", ports: []int32{0, 70000, 8080}, want: "http://10.0.0.7:8080/metrics"},
		{name: "no port", ip: "10.0.0.7", field: FieldPort},
		{name: "port out of range", port: "65536", ip: "10.0.0.7", field: FieldPort},
		{name: "signed port", port: "+80", ip: "10.0.0.7", want: "http://10.0.0.7:80/metrics"},
		{name: "scheme", port: "80", scheme: "file", ip: "10.0.0.7", field: FieldScheme},
		{name: "authority in path", port: "80", path: "//evil/", ip: "10.0.0.7", field: FieldPath},
		{name: "user in path", port: "80", path: "@evil/", ip: "10.0.0.7", field: FieldPath},
		{name: "query", port: "80", path: "/m?x", ip: "10.0.0.7", field: FieldPath},
		{name: "long path", port: "80", path: "/" + strings.Repeat("a", MaxPathLen), ip: "10.0.0.7", field: FieldPath},
		{name: "host and port as IP", port: "80", ip: "1.2.3.4:5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Build(tc.port, tc.path, tc.scheme, tc.ip, tc.ports)
			var fe *FieldError
			switch {
			case tc.field != "":
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("Build = %q, %v; want the %s refused", got, err, tc.field)
				}
			case tc.want == "":
				if err == nil || errors.As(err, &fe) {
					t.Fatalf("Build = %q, %v; want an address error", got, err)
				}
			case err != nil || got != tc.want:
				t.Fatalf("Build = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// FuzzBuild: whatever a tenant writes in annotations and ports, and
// whatever the pod IP, Build does not panic, and every URL it builds is
// http(s) to the pod's own IP and a valid port, with no user, query or
// fragment.
func FuzzBuild(f *testing.F) {
	f.Add("8000", "/metrics", "http", "10.0.0.7", int32(8080))
	f.Add("", "@evil/", "https", "fd00::7", int32(0))
	f.Add("+80", "//evil/", "http", "10.0.0.7", int32(70000))
	f.Add("0080", "?x#y", "http", "::ffff:10.0.0.7", int32(-1))
	f.Add("65536", "a\r\nb c", "HTTP", "1.2.3.4:5", int32(1))
	f.Fuzz(func(t *testing.T, port, path, scheme, ip string, containerPort int32) {
		u, err := Build(port, path, scheme, ip, []int32{containerPort})
		if err != nil {
			return
		}
		p, err := url.Parse(u)
		if err != nil {
			t.Fatalf("%q does not parse: %v", u, err)
		}
		if p.Scheme != "http" && p.Scheme != "https" {
			t.Fatalf("%q: scheme %q", u, p.Scheme)
		}
		if p.Hostname() != ip {
			t.Fatalf("%q: host %q, want the pod IP %q", u, p.Hostname(), ip)
		}
		if n, err := strconv.Atoi(p.Port()); err != nil || n < 1 || n > 65535 {
			t.Fatalf("%q: port %q", u, p.Port())
		}
		if p.User != nil || p.RawQuery != "" || p.Fragment != "" || p.Opaque != "" || !strings.HasPrefix(p.Path, "/") || strings.HasPrefix(p.Path, "//") {
			t.Fatalf("%q: user %v, query %q, fragment %q, opaque %q, path %q", u, p.User, p.RawQuery, p.Fragment, p.Opaque, p.Path)
		}
		if strings.ContainsAny(u, " \t\r\n\x00\\@") {
			t.Fatalf("%q: contains a character the request line or an authority could be split on", u)
		}
	})
}
