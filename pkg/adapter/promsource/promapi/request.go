package promapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// The HTTP exchange of one instant query, as client_golang's v1 API does
// it (api/prometheus/v1/api.go, Query, DoGetFallback and Do at v1.24.1):
// the same parameters, POSTed as a form and sent again as a GET where the
// server refuses the POST, and the same reading of the status code. Only
// the decoding of the answer is this package's own (decode.go): the v1
// API decodes each sample through encoding/json's reflection, about half
// the adapter's CPU for a 10,000-pod list.

// queryPath is the instant query endpoint, below Config.URL.
const queryPath = "/api/v1/query"

// exchange sends q and returns the answer's body once its status code
// says it holds a Prometheus API answer (2xx, or 400 and 422, which
// Prometheus sends with an error body).
func (c *Client) exchange(ctx context.Context, q string, at time.Time) (code int, body []byte, err error) {
	u := c.client.URL(queryPath, nil)
	// The base URL's own query parameters are sent too, as the v1 API
	// sends them.
	args := u.Query()
	if c.timeout > 0 {
		args.Set("timeout", c.timeout.String())
	}
	if c.lookback > 0 {
		args.Set("lookback_delta", c.lookback.String())
	}
	args.Set("query", q)
	if !at.IsZero() {
		args.Set("time", formatTime(at))
	}
	encoded := args.Encode()
	resp, body, err := c.do(ctx, http.MethodPost, u, encoded)
	if resp != nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented) {
		resp, body, err = c.do(ctx, http.MethodGet, u, encoded)
	}
	if err != nil {
		return 0, nil, err
	}
	code = resp.StatusCode
	if code/100 != 2 && !apiError(code) {
		typ, msg := errorTypeAndMsgFor(code)
		return code, nil, &v1.Error{Type: typ, Msg: msg, Detail: string(body)}
	}
	return code, body, nil
}

// do sends the encoded arguments as method, a POSTed form or a GET's
// query.
func (c *Client) do(ctx context.Context, method string, u *url.URL, encoded string) (*http.Response, []byte, error) {
	var req *http.Request
	var err error
	if method == http.MethodPost {
		req, err = http.NewRequest(http.MethodPost, u.String(), strings.NewReader(encoded))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		// A POST with no idempotency key is never retried by net/http;
		// an instant query is idempotent.
		req.Header["Idempotency-Key"] = nil
	} else {
		get := *u
		get.RawQuery = encoded
		if req, err = http.NewRequest(http.MethodGet, get.String(), nil); err != nil {
			return nil, nil, err
		}
	}
	return c.client.Do(ctx, req)
}

// apiError reports whether code is one Prometheus answers an error body
// with.
func apiError(code int) bool {
	return code == http.StatusUnprocessableEntity || code == http.StatusBadRequest
}

func errorTypeAndMsgFor(code int) (v1.ErrorType, string) {
	switch code / 100 {
	case 4:
		return v1.ErrClient, fmt.Sprintf("client error: %d", code)
	case 5:
		return v1.ErrServer, fmt.Sprintf("server error: %d", code)
	}
	return v1.ErrBadResponse, fmt.Sprintf("bad response code %d", code)
}

func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.Unix())+float64(t.Nanosecond())/1e9, 'f', -1, 64)
}
