package app

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestScaleDownOptionsValidate(t *testing.T) {
	cases := []struct {
		args []string
		want string // substring of the error; "" for none
	}{
		{nil, ""},
		{[]string{"--scale-down-controller", "--scale-down-resync=1s", "--scale-down-patch-qps=50", "--scale-down-patch-burst=100"}, ""},
		{[]string{"--scale-down-resync=0s"}, "--scale-down-resync"},
		{[]string{"--scale-down-patch-qps=0"}, "--scale-down-patch-qps"},
		{[]string{"--scale-down-patch-burst=0"}, "--scale-down-patch-burst"},
		{[]string{"--scale-down-gpu-utilization-threshold=1.5"}, "threshold"},
		{[]string{"--scale-down-gpu-utilization-threshold=0"}, "threshold"},
		{[]string{"--scale-down-unneeded-time=0s"}, "--scale-down-unneeded-time"},
		{[]string{"--scale-down-idle-time=-1s"}, "--scale-down-idle-time"},
		{[]string{"--scale-down-controller", "--scale-down-lease-namespace="}, "lease-namespace"},
		{[]string{"--scale-down-controller", "--leader-elect-resource-namespace="}, "--leader-elect-resource-namespace"},
		{[]string{"--scale-down-controller", "--leader-elect-resource-lock=configmaps"}, "--leader-elect-resource-lock"},
		{[]string{"--scale-down-controller", "--leader-elect-renew-deadline=20s"}, "--leader-elect-renew-deadline"},
		{[]string{"--scale-down-controller", "--leader-elect=false", "--leader-elect-resource-namespace="}, ""},
	}
	for _, tc := range cases {
		o := NewOptions()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		o.Complete()
		err := o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}
