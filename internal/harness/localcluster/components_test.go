package localcluster

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteStagesOnlyStages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stages.yaml")
	if err := writeStages(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	var names []string
	for _, doc := range docs {
		if !strings.Contains(doc, "\nkind: Stage\n") {
			t.Errorf("document is not a Stage:\n%s", doc)
		}
		for line := range strings.SplitSeq(doc, "\n") {
			if name, ok := strings.CutPrefix(line, "  name: "); ok {
				names = append(names, name)
				break
			}
		}
	}
	want := "node-heartbeat-with-lease node-initialize pod-complete pod-delete pod-ready-after pod-ready pod-start-unready"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("stages = %s, want %s", got, want)
	}
	// kwok turns off its defaulting when the file holds a KwokConfiguration.
	if strings.Contains(string(data), "KwokConfiguration") {
		t.Error("stages file holds a KwokConfiguration")
	}
}

// TestComponentsStayOnLoopback guards the rule that nothing listens beyond
// 127.0.0.1: every address flag of every component must name it.
func TestComponentsStayOnLoopback(t *testing.T) {
	k := &pki{dir: "/d/pki"}
	p := ports{etcdClient: 1, etcdPeer: 2, apiserver: 3, controllerManager: 4, scheduler: 5}
	o := Options{HPASyncPeriod: 5 * time.Second, ControllerManagerArgs: []string{"--kube-api-qps=200"}}
	all := map[string][]string{
		"etcd":                    etcdArgs("/d/etcd", p),
		"kube-apiserver":          apiserverArgs("/d", k, p),
		"kube-controller-manager": controllerManagerArgs("/d", "/d/kcm.kubeconfig", k, p, o),
		"kube-scheduler":          schedulerArgs("/d", "/d/s.kubeconfig", p),
		"kwok":                    kwokArgs("/d/kwok.kubeconfig", "/d/stages.yaml", netip.MustParsePrefix(PodCIDR)),
	}
	for comp, args := range all {
		for _, arg := range args {
			name, value, _ := strings.Cut(arg, "=")
			switch {
			case strings.HasSuffix(name, "-urls") || strings.HasSuffix(name, "-servers") || name == "--initial-cluster":
				if !strings.Contains(value, "://127.0.0.1:") {
					t.Errorf("%s %s: not loopback", comp, arg)
				}
			case strings.HasSuffix(name, "-address") || name == "--node-ip":
				if value != "127.0.0.1" {
					t.Errorf("%s %s: not loopback", comp, arg)
				}
			case strings.HasSuffix(name, "-dir") || strings.HasSuffix(name, "-file") || name == "--kubeconfig":
				if !strings.HasPrefix(value, "/d/") {
					t.Errorf("%s %s: outside the work dir", comp, arg)
				}
			}
		}
	}
	for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !strings.Contains(strings.Join(all[comp], " "), "--bind-address=127.0.0.1") {
			t.Errorf("%s lacks --bind-address=127.0.0.1", comp)
		}
	}
	kcm := strings.Join(all["kube-controller-manager"], " ")
	for _, want := range []string{"--horizontal-pod-autoscaler-sync-period=5s", "--horizontal-pod-autoscaler-downscale-stabilization=0s", "--kube-api-qps=200"} {
		if !strings.Contains(kcm, want) {
			t.Errorf("controller manager lacks %s", want)
		}
	}
}

func TestResolveBinDir(t *testing.T) {
	full := t.TempDir()
	for _, name := range binaryNames {
		if err := os.WriteFile(filepath.Join(full, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	partial := t.TempDir()
	if err := os.WriteFile(filepath.Join(partial, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "kwok"), nil, 0o644); err != nil { // not executable
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, env string
		want           string
		wantErr        string
	}{
		{name: "option", dir: full, env: partial, want: full},
		{name: "env", env: full, want: full},
		{name: "missing binaries", dir: partial, wantErr: "lacks executables kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(BinDirEnv, tt.env)
			got, err := resolveBinDir(context.Background(), tt.dir, slog.New(slog.DiscardHandler), nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("resolveBinDir = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestStartNeedsDir(t *testing.T) {
	if _, err := Start(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "Dir is required") {
		t.Errorf("Start without Dir: %v", err)
	}
}

func TestPodPrefix(t *testing.T) {
	for _, tc := range []struct {
		env, want string
		ok        bool
	}{
		{"", PodCIDR, true},
		{"127.2.0.0/16", "127.2.0.0/16", true},
		{"127.3.4.5/16", "127.3.0.0/16", true},
		{"10.0.0.0/16", "", false},
		{"127.0.0.0/7", "", false},
		{"::1/128", "", false},
		{"127.2.0.0", "", false},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(PodCIDREnv, tc.env)
			p, err := PodPrefix()
			if (err == nil) != tc.ok || (tc.ok && p.String() != tc.want) {
				t.Errorf("PodPrefix() with %s=%q = %v, %v; want %s (ok %v)", PodCIDREnv, tc.env, p, err, tc.want, tc.ok)
			}
		})
	}
}
