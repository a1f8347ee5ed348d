package kedascaler

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Limits bound what clients can hold of the scaler: connections, by all
// and from one address, the time a connection has to complete its TLS
// handshake, and StreamIsActive streams, by all and for one namespace.
// Each stream holds a goroutine and gRPC's buffers (about 10 KiB: 20,000
// streams once took 207 MiB), each connection a socket and its buffers
// (silent ones were once held 118 s each). Zero fields take the defaults.
type Limits struct {
	MaxConnections, MaxConnectionsPerAddress int
	HandshakeTimeout                         time.Duration
	MaxStreams, MaxStreamsPerNamespace       int
}

// Defaults of Limits. KEDA's operator keeps one connection per scaler
// address and TLS configuration (one per TriggerAuthentication) and one
// stream per external-push trigger.
const (
	DefaultMaxConnections           = 1024
	DefaultMaxConnectionsPerAddress = 64
	DefaultHandshakeTimeout         = 10 * time.Second
	DefaultMaxStreams               = 4096
	DefaultMaxStreamsPerNamespace   = 256
)

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxConnections, DefaultMaxConnections)
	def(&l.MaxConnectionsPerAddress, DefaultMaxConnectionsPerAddress)
	def(&l.MaxStreams, DefaultMaxStreams)
	def(&l.MaxStreamsPerNamespace, DefaultMaxStreamsPerNamespace)
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	l.MaxConnectionsPerAddress = min(l.MaxConnectionsPerAddress, l.MaxConnections)
	l.MaxStreamsPerNamespace = min(l.MaxStreamsPerNamespace, l.MaxStreams)
	return l
}

// serverOptions are the gRPC server's bounds: the handshake deadline, idle
// connections closed, keepalive pings from clients no more often than
// every 10 s, and as many concurrent RPCs on one connection as the streams
// allowed plus room for unary calls (KEDA multiplexes all its triggers'
// streams on one connection, and a client that hits the per-connection
// bound waits rather than fails).
func (l Limits) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.MaxConcurrentStreams(uint32(l.MaxStreams + 256)),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: 2 * time.Minute, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// streamSlots counts open StreamIsActive streams.
type streamSlots struct {
	max, perNamespace int
	mu                sync.Mutex
	total             int
	byNamespace       map[string]int
}

func newStreamSlots(l Limits) *streamSlots {
	return &streamSlots{max: l.MaxStreams, perNamespace: l.MaxStreamsPerNamespace, byNamespace: map[string]int{}}
}

// take reserves a stream of namespace, or fails with ResourceExhausted;
// the caller gives it back with release.
func (s *streamSlots) take(namespace string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.max:
		return status.Errorf(codes.ResourceExhausted, "%d StreamIsActive streams are open, the most the scaler serves", s.max)
	case s.byNamespace[namespace] >= s.perNamespace:
		return status.Errorf(codes.ResourceExhausted, "namespace %s has %d StreamIsActive streams open, the most one namespace may", namespace, s.perNamespace)
	}
	s.total++
	s.byNamespace[namespace]++
	return nil
}

func (s *streamSlots) release(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.byNamespace[namespace]--; s.byNamespace[namespace] <= 0 {
		delete(s.byNamespace, namespace)
	}
}

// limitListener closes, as soon as they are accepted, the connections past
// MaxConnections open, or past MaxConnectionsPerAddress from one address:
// Accept never blocks on them, so a flood of connections from one pod
// costs the others nothing, and one from many is held for at most the
// handshake timeout each.
type limitListener struct {
	net.Listener
	max, perAddress int
	log             *slog.Logger

	mu     sync.Mutex
	open   int
	byAddr map[string]int
	// refused counts the connections closed since the last log line,
	// which is written at most once a minute.
	refused  int
	loggedAt time.Time
}

func newLimitListener(l net.Listener, lim Limits, log *slog.Logger) *limitListener {
	return &limitListener{Listener: l, max: lim.MaxConnections, perAddress: lim.MaxConnectionsPerAddress, log: log, byAddr: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		if l.admit(addr) {
			return &limitedConn{Conn: c, l: l, addr: addr}, nil
		}
		_ = c.Close()
	}
}

func (l *limitListener) admit(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max || l.byAddr[addr] >= l.perAddress {
		l.refused++
		if now := time.Now(); now.Sub(l.loggedAt) >= time.Minute {
			l.log.Warn("KEDA scaler: connections refused past the limits", "refused", l.refused, "open", l.open,
				"maxConnections", l.max, "maxConnectionsPerAddress", l.perAddress, "lastFrom", addr)
			l.refused, l.loggedAt = 0, now
		}
		return false
	}
	l.open++
	l.byAddr[addr]++
	return true
}

func (l *limitListener) done(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

func hostOf(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedConn gives its place back once, when closed.
type limitedConn struct {
	net.Conn
	l    *limitListener
	addr string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.done(c.addr) })
	return err
}
