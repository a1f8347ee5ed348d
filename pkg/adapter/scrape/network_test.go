package scrape

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestScrapeDoesNotFollowRedirects points a target at another server by
// every kind of redirect: the scrape fails as a redirect and the other
// server is never asked.
func TestScrapeDoesNotFollowRedirects(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		_, _ = w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(other.Close)
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+"/metrics", code)
			}))
			t.Cleanup(srv.Close)
			_, err := New(Config{}).Scrape(t.Context(), srv.URL)
			if got := Reason(err); got != ReasonRedirect {
				t.Errorf("reason %q, want %q (err: %v)", got, ReasonRedirect, err)
			}
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("the redirect's Location was fetched %d times", n)
			}
		})
	}
}

// TestScrapeSendsNoCredentials checks that neither userinfo in a URL nor a
// caller's cookie jar puts credentials on the wire.
func TestScrapeSendsNoCredentials(t *testing.T) {
	var hits atomic.Int64
	var leaked atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		for _, h := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
			if v := r.Header.Get(h); v != "" {
				leaked.Store(h + ": " + v)
			}
		}
		_, _ = w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(srv.Close)

	t.Run("userinfo refused", func(t *testing.T) {
		u, _ := url.Parse(srv.URL)
		u.User = url.UserPassword("admin", "hunter2")
		_, err := New(Config{}).Scrape(t.Context(), u.String())
		if err == nil {
			t.Fatal("a URL with credentials was scraped")
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the password: %v", err)
		}
		if hits.Load() != 0 {
			t.Errorf("the target was asked %d times", hits.Load())
		}
	})
	t.Run("caller's jar ignored", func(t *testing.T) {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(srv.URL)
		jar.SetCookies(u, []*http.Cookie{{Name: "session", Value: "secret"}})
		client := &http.Client{Transport: newTransport(nil, 1), Jar: jar}
		if _, err := New(Config{Client: client}).Scrape(t.Context(), srv.URL); err != nil {
			t.Fatal(err)
		}
		if v := leaked.Load(); v != nil {
			t.Errorf("request carried %v", v)
		}
	})
}

// TestParseErrorRedactsInput feeds malformed expositions whose bad part is
// a secret: the error keeps the line number but never the input.
func TestParseErrorRedactsInput(t *testing.T) {
	const secret = "s3cr3t-t0ken"
	tests := []struct{ name, ct, body string }{
		{"value", ctText, "up 1\nup " + secret + "\n"},
		{"label value escape", ctText, "up 1\nup{a=\"" + secret + "\\q\"} 1\n"},
		{"timestamp", ctText, "up 1\nup 1 " + secret + "\n"},
		{"type", ctText, "# TYPE up " + secret + "\n"},
		{"le label", ctText, "# TYPE h histogram\nh_bucket{le=\"" + secret + "\"} 1\n"},
		{"openmetrics value", ctOM, "up " + secret + "\n# EOF\n"},
		{"unterminated quote", ctText, "up{a=\"" + secret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := serve(t, 200, http.Header{"Content-Type": {tt.ct}}, []byte(tt.body))
			_, err := New(Config{}).Scrape(t.Context(), srv.URL)
			if Reason(err) != ReasonParse {
				t.Fatalf("reason %q, want parse (err: %v)", Reason(err), err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error quotes the body: %v", err)
			}
			if !strings.Contains(err.Error(), "line ") {
				t.Errorf("error lost the line number: %v", err)
			}
		})
	}
}

func TestRedactQuoted(t *testing.T) {
	tests := []struct{ in, want string }{
		{`no quotes at all`, `no quotes at all`},
		{`line 3: expected float as value, got "abc"`, `line 3: expected float as value, got <redacted>`},
		{`got "a\"b" and 'c'`, `got <redacted> and <redacted>`},
		{`invalid escape sequence '\q'`, `invalid escape sequence <redacted>`},
		{`open "never closed`, `open <redacted>`},
	}
	for _, tt := range tests {
		if got := redactQuoted(tt.in); got != tt.want {
			t.Errorf("redactQuoted(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
