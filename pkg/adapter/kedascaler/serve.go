package kedascaler

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pb "github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler"
)

// Config configures Serve.
type Config struct {
	Metrics MetricsReader
	TLS     TLSFiles
	// CheckInterval is StreamIsActive's (DefaultCheckInterval if 0).
	CheckInterval time.Duration
	// Requests counts each call; nil: not counted.
	Requests *Requests
	Logger   *slog.Logger
	// Authorizer decides which namespaces a client may read (authz.go).
	// AllowAllNamespaces, instead, serves every namespace to every client
	// the TLS layer admits; one of the two is required.
	Authorizer         Authorizer
	AllowAllNamespaces bool
	// Limits bound connections and streams (limits.go).
	Limits Limits
}

// maxRecvBytes bounds a request: a trigger's metadata is a few short
// strings, and a client is not trusted to send less.
const maxRecvBytes = 64 << 10

// Server is the gRPC server of the external scaler service.
type Server struct {
	grpc   *grpc.Server
	tls    *tlsReloader
	log    *slog.Logger
	scaler *Scaler
	limits Limits
}

// NewServer checks cfg and loads its TLS files.
func NewServer(cfg Config) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		return nil, fmt.Errorf("kedascaler: no metrics reader")
	}
	r, err := newTLSReloader(cfg.TLS, log)
	if err != nil {
		return nil, fmt.Errorf("kedascaler: TLS: %w", err)
	}
	if err := cfg.checkAuthorization(); err != nil {
		return nil, fmt.Errorf("kedascaler: %w", err)
	}
	s := &Server{tls: r, log: log, scaler: NewScaler(cfg.Metrics, cfg.CheckInterval, log), limits: cfg.Limits.withDefaults()}
	s.scaler.authz, s.scaler.streams = cfg.Authorizer, newStreamSlots(s.limits)
	s.grpc = grpc.NewServer(append([]grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(r.serverConfig())),
		grpc.MaxRecvMsgSize(maxRecvBytes),
		grpc.ChainUnaryInterceptor(cfg.Requests.unary),
		grpc.ChainStreamInterceptor(cfg.Requests.stream),
	}, s.limits.serverOptions()...)...)
	pb.RegisterExternalScalerServer(s.grpc, s.scaler)
	return s, nil
}

// Serve serves on lis until ctx is done, then stops: streams open at that
// point end, and KEDA reconnects to another replica.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.tls.run(ctx)
	go func() {
		<-ctx.Done()
		// Streams run until their client leaves: stop, not GracefulStop.
		s.grpc.Stop()
	}()
	s.log.Info("serving KEDA's external scaler protocol", "address", lis.Addr().String())
	if err := s.grpc.Serve(newLimitListener(lis, s.limits, s.log)); err != nil && ctx.Err() == nil {
		return fmt.Errorf("kedascaler: %w", err)
	}
	return nil
}

// Requests counts the scaler's calls by method and gRPC status code.
type Requests struct{ vec *prometheus.CounterVec }

// NewRequests returns an unregistered counter.
func NewRequests() *Requests {
	return &Requests{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuscale_adapter_keda_scaler_requests_total",
		Help: "KEDA external scaler calls by method (IsActive, StreamIsActive, GetMetricSpec, GetMetrics) and gRPC code (OK, InvalidArgument: wrong trigger metadata, NotFound: unknown signal, Unavailable: no value). A stream is counted when it ends.",
	}, []string{"method", "code"})}
}

// Describe implements prometheus.Collector.
func (r *Requests) Describe(ch chan<- *prometheus.Desc) { r.vec.Describe(ch) }

// Collect implements prometheus.Collector.
func (r *Requests) Collect(ch chan<- prometheus.Metric) { r.vec.Collect(ch) }

func (r *Requests) observe(fullMethod string, err error) {
	if r != nil {
		r.vec.WithLabelValues(path.Base(fullMethod), status.Code(err).String()).Inc()
	}
}

func (r *Requests) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	r.observe(info.FullMethod, err)
	return resp, err
}

func (r *Requests) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	r.observe(info.FullMethod, err)
	return err
}
