package app_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReservedTokenReload: the reserved lane's token is an optional Secret
// volume, empty until the adapter has made the Secret. The exporter starts
// without it and serves no lane; it opens the lane when the token file
// appears, follows it when it changes, and closes it when the file holds
// no usable token, without a restart. The API's one ordinary slot is held
// throughout, so a request is served only on the lane.
func TestReservedTokenReload(t *testing.T) {
	const tokenA, tokenB = "0123456789abcdef-token-a", "0123456789abcdef-token-b"
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	// As the kubelet swaps a Secret's files in: whole, by a rename.
	project := func(token string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.WriteFile(tmp, []byte(token+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	o := simOptions("")
	o.ReservedTokenFile = path
	o.MaxRequests = 1
	o.MaxRequestsWait = 50 * time.Millisecond
	o.CollectInterval = time.Second
	o.ReadTimeout = time.Minute
	p := start(t, o)
	base := "http://" + p.addr
	fetchGPUs(t, base)

	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprint(conn, "PUT /api/v1/sim/gpus/0 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	api := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/gpus", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	want := func(what, token string, code int) {
		t.Helper()
		eventually(t, what, func() error {
			if got := api(token); got != code {
				return fmt.Errorf("status %d, want %d", got, code)
			}
			return nil
		})
	}
	want("the ordinary slot held", "", http.StatusServiceUnavailable)
	if got := api(tokenA); got != http.StatusServiceUnavailable {
		t.Errorf("a token before any token file: %d, want the ordinary lane's 503", got)
	}
	project(tokenA)
	want("the lane open once the token file appears", tokenA, http.StatusOK)
	project(tokenB)
	want("the lane on the new token once the file changes", tokenB, http.StatusOK)
	if got := api(tokenA); got != http.StatusServiceUnavailable {
		t.Errorf("the replaced token: %d, want the ordinary lane's 503", got)
	}
	project("short")
	want("the lane closed on a token too short", tokenB, http.StatusServiceUnavailable)
	eventually(t, "the refusal counted", func() error {
		_, body := get(t, http.DefaultClient, base+"/metrics")
		if !strings.Contains(body, "gpuscale_exporter_reserved_token_loaded 0\n") ||
			strings.Contains(body, `gpuscale_exporter_reserved_token_errors_total{reason="too_short"} 0`+"\n") {
			return errors.New("gpuscale_exporter_reserved_token_loaded not 0, or no too_short error counted")
		}
		return nil
	})
}
