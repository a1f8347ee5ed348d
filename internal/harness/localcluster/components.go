package localcluster

import (
	"embed"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// Cluster-wide settings the components share.
const (
	serviceCIDR    = "10.96.0.0/16"
	firstServiceIP = "10.96.0.1" // the kubernetes Service; in the API server's SANs
	saIssuer       = "https://kubernetes.default.svc.cluster.local"
	// PodCIDR is where kwok allocates pod IPs unless PodCIDREnv says
	// otherwise. It lies in 127.0.0.0/8, so a test process can listen on a
	// fake pod's IP.
	PodCIDR = "127.1.0.0/16"
	// PodCIDREnv names the environment variable that moves the pod IPs
	// (say to 127.2.0.0/16), so that two local clusters on one machine,
	// each serving simulated pods on their IPs, do not collide.
	PodCIDREnv = "GPUSCALE_POD_CIDR"
	// FakeNodeAnnotation marks the nodes kwok manages; AddGPUNode sets it.
	FakeNodeAnnotation = "kwok.x-k8s.io/node"
	// ReadyAfterAnnotation holds a duration (such as "60s"). A pod that
	// carries it starts running at once but turns Ready only that long
	// after, as an inference server does while it loads its model.
	ReadyAfterAnnotation = "sim.gpuscale.io/ready-after"
	fakeNodeValue        = "fake"
)

// stageFiles are kwok's Stage objects (node initialize and heartbeat, pod
// ready, complete and delete) copied from sigs.k8s.io/kwok v0.8.0, plus two
// of ours that delay readiness by ReadyAfterAnnotation. The
// config file kwok reads must hold only Stage objects: a KwokConfiguration
// object there turns off kwok's defaulting and it refuses to start.
//
//go:embed stages/*.yaml
var stageFiles embed.FS

// ports are the loopback ports of one start attempt.
type ports struct {
	etcdClient, etcdPeer, apiserver, controllerManager, scheduler int
}

// newPorts picks free ports. Another process may take one before the
// component binds it; Start retries then.
func newPorts() (ports, error) {
	p, err := testenv.FreePorts(5)
	if err != nil {
		return ports{}, err
	}
	return ports{etcdClient: p[0], etcdPeer: p[1], apiserver: p[2], controllerManager: p[3], scheduler: p[4]}, nil
}

// writeStages writes kwok's Stage objects into one multi-document file.
func writeStages(path string) error {
	names, err := fs.Glob(stageFiles, "stages/*.yaml")
	if err != nil {
		return fmt.Errorf("list kwok stages: %w", err)
	}
	sort.Strings(names)
	docs := make([]string, 0, len(names))
	for _, name := range names {
		data, err := stageFiles.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read kwok stage %s: %w", name, err)
		}
		docs = append(docs, strings.TrimSpace(string(data)))
	}
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("write kwok stages: %w", err)
	}
	return nil
}

func loopbackURL(scheme string, port int) string {
	return scheme + "://127.0.0.1:" + strconv.Itoa(port)
}

func etcdArgs(dataDir string, p ports) []string {
	client, peer := loopbackURL("http", p.etcdClient), loopbackURL("http", p.etcdPeer)
	return []string{
		"--name=default",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// The data dies with the test; fsync only slows a shared disk.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func apiserverArgs(dir string, k *pki, p ports) []string {
	return []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(p.apiserver),
		// The default reconciler refuses a loopback advertise address and
		// exits; nothing needs the kubernetes Service's endpoints here.
		"--endpoint-reconciler-type=none",
		"--etcd-servers=" + loopbackURL("http", p.etcdClient),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + k.path(apiserverCertFile),
		"--tls-private-key-file=" + k.path(apiserverKeyFile),
		"--client-ca-file=" + k.path(caCertFile),
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--service-account-issuer=" + saIssuer,
		"--service-account-key-file=" + k.path(saPubFile),
		"--service-account-signing-key-file=" + k.path(saKeyFile),
		// The aggregation layer, for the metrics adapter's APIServices.
		"--enable-aggregator-routing=false",
		"--requestheader-client-ca-file=" + k.path(frontProxyCAFile),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + k.path(frontProxyCertFile),
		"--proxy-client-key-file=" + k.path(frontProxyKeyFile),
	}
}

func controllerManagerArgs(dir, kubeconfig string, k *pki, p ports, o Options) []string {
	return append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(p.controllerManager),
		"--cert-dir=" + filepath.Join(dir, "controller-manager-certs"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + k.path(saKeyFile),
		"--root-ca-file=" + k.path(caCertFile),
		"--cluster-signing-cert-file=" + k.path(caCertFile),
		"--cluster-signing-key-file=" + k.path(caKeyFile),
		"--horizontal-pod-autoscaler-sync-period=" + o.HPASyncPeriod.String(),
		"--horizontal-pod-autoscaler-downscale-stabilization=" + o.HPADownscaleStabilization.String(),
		// The default is under /usr/libexec, which the controller manager
		// would otherwise try to create.
		"--flex-volume-plugin-dir=" + filepath.Join(dir, "flexvolume"),
	}, o.ControllerManagerArgs...)
}

func schedulerArgs(dir, kubeconfig string, p ports) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(p.scheduler),
		"--cert-dir=" + filepath.Join(dir, "scheduler-certs"),
		"--leader-elect=false",
	}
}

// PodPrefix is the pod CIDR in use: PodCIDREnv's value, or PodCIDR. It
// must lie in 127.0.0.0/8: nothing here listens beyond loopback.
func PodPrefix() (netip.Prefix, error) {
	v := os.Getenv(PodCIDREnv)
	if v == "" {
		v = PodCIDR
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: %w", PodCIDREnv, err)
	}
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	if !p.Addr().Is4() || p.Bits() < loopback.Bits() || !loopback.Contains(p.Addr()) {
		return netip.Prefix{}, fmt.Errorf("%s=%s: not within %s", PodCIDREnv, v, loopback)
	}
	return p.Masked(), nil
}

func kwokArgs(kubeconfig, stagesPath string, podCIDR netip.Prefix) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + stagesPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + FakeNodeAnnotation + "=" + fakeNodeValue,
		"--cidr=" + podCIDR.String(),
		"--node-ip=127.0.0.1",
		// The node-heartbeat-with-lease stage only sets the node's
		// conditions once and relies on the Lease for liveness; without a
		// lease duration kwok renews no Lease, and after the node monitor
		// grace period the node lifecycle controller marks every node (and
		// so every pod) NotReady.
		"--node-lease-duration-seconds=40",
	}
}
