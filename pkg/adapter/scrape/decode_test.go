package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// FuzzParse feeds arbitrary bytes through the body decoding path, as each
// of the formats a server may declare. It must never panic, and every
// failure must be classified as a parse error or as one of the default
// limits (a label value over 2,048 bytes, too many series): the input is
// under the cap and the reader cannot fail.
func FuzzParse(f *testing.F) {
	f.Add(readTestdata(f, "vllm.prom"))
	f.Add(readTestdata(f, "vllm.om"))
	for _, s := range []string{
		"",
		"\n",
		"# EOF\n",
		"up 1\n",
		"# HELP a x\\ny\n# TYPE a summary\na{quantile=\"0.5\"} 1\na_sum 2\na_count 3\n",
		"# TYPE \"gpu.util\" gauge\n{\"gpu.util\",\"gpu.id\"=\"0\"} 97 1700000000000\n",
		"# TYPE b counter\nb_total{l=\"v\"} 3 1520879607.5 # {trace_id=\"x\"} 1 1520879607\n# EOF\n",
		"# TYPE i info\ni_info{v=\"1\"} 1\n# TYPE s stateset\ns{s=\"a\"} 1\n# UNIT s bytes\n# EOF\n",
		"# TYPE g gaugehistogram\ng_bucket{le=\"+Inf\"} 1\ng_gcount 1\ng_gsum 1\n# EOF",
		"a{l=\"\\\"}\"} NaN\nb +Inf -1\n",
	} {
		f.Add([]byte(s))
	}
	headers := []http.Header{
		{"Content-Type": {ctText}},
		{"Content-Type": {ctOM}},
		{"Content-Type": {string(expfmt.FmtProtoDelim)}},
		{},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, h := range headers {
			fams, err := decodeBody(bytes.NewReader(data), h, 1<<20, nil, nil)
			if err != nil {
				if r := Reason(err); r != ReasonParse && r != ReasonLimit {
					t.Fatalf("%s: error %v classified %q, want parse or limit", h.Get("Content-Type"), err, r)
				}
				continue
			}
			for name, mf := range fams {
				if mf.GetName() != name || len(mf.GetMetric()) == 0 {
					t.Fatalf("family %q: name %q, %d series", name, mf.GetName(), len(mf.GetMetric()))
				}
			}
		}
	})
}

func TestDecodeProtobuf(t *testing.T) {
	want, err := decode(bytes.NewReader(readTestdata(t, "vllm.prom")), expfmt.FmtText, 1<<20, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.FmtProtoDelim)
	for _, mf := range want {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	got, err := decode(&buf, expfmt.FmtProtoDelim, 1<<20, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, mf := range want {
		if !proto.Equal(got[name], mf) {
			t.Errorf("%s: got %v, want %v", name, got[name], mf)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d families, want %d", len(got), len(want))
	}
}

// TestDecodeProtobufHugeLengthPrefix sends a length prefix of 1 TiB: it must
// be refused, not allocated.
func TestDecodeProtobufHugeLengthPrefix(t *testing.T) {
	body := protowire.AppendVarint(nil, 1<<40)
	_, err := decode(bytes.NewReader(append(body, "tiny"...)), expfmt.FmtProtoDelim, 1<<20, nil, nil)
	if Reason(err) != ReasonParse {
		t.Errorf("err = %v, want a parse error", err)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{context.Canceled, ReasonCanceled},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), ReasonTimeout},
		{fmt.Errorf("read: %w", ErrTooLarge), ReasonTooLarge},
		{&StatusError{Code: 502}, ReasonHTTPStatus},
		{&parseError{format: "text", err: errors.New("bad")}, ReasonParse},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, ReasonConnect},
		{&net.DNSError{Err: "no such host", Name: "x"}, ReasonConnect},
		{&net.OpError{Op: "read", Err: errors.New("connection reset")}, ReasonOther},
		{errors.New("something else"), ReasonOther},
		{&scrapeError{url: "http://x", reason: ReasonTimeout, err: context.Canceled}, ReasonTimeout},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestParseErrorMessageIsBounded(t *testing.T) {
	long := bytes.Repeat([]byte("é"), 1000)
	msg := (&parseError{format: "text", err: errors.New(string(long))}).Error()
	if len(msg) > maxParseMsg+64 {
		t.Errorf("message is %d bytes", len(msg))
	}
	if !bytes.HasSuffix([]byte(msg), []byte("(truncated)")) {
		t.Errorf("message %q does not say it was truncated", msg)
	}
}
