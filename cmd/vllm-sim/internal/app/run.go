package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/server"
)

// shutdownGrace is how long in-flight requests get to end at stop.
const shutdownGrace = 5 * time.Second

// Run serves until ctx ends. Once listening it prints
// "vllm-sim listening on http://HOST:PORT" (the real port) to out, after
// "vllm-sim gRPC listening on HOST:PORT" with a gRPC port, and after
// "vllm-sim KV events on tcp://HOST:PORT" for each engine when KV-cache
// events are on ("vllm-sim KV events to tcp://HOST:PORT" when the engines
// connect to the endpoint), each followed by "vllm-sim KV event replay on
// tcp://HOST:PORT" with a replay endpoint.
func Run(ctx context.Context, o *Options, out io.Writer) error {
	if !o.KVEvents.publishes() {
		return serve(ctx, o, out, nil)
	}
	events, err := listenEvents(ctx, o.KVEvents, o.Host, o.DataParallelStartRank, o.engines())
	if err != nil {
		return err
	}
	defer func() { // after serve has stopped the engines
		for _, p := range events {
			_ = p.close()
		}
	}()
	for _, p := range events {
		at := "to tcp://" + p.to
		if a := p.pub.Addr(); a != nil {
			at = "on tcp://" + a.String()
		}
		if _, err := fmt.Fprintf(out, "vllm-sim KV events %s\n", at); err != nil {
			return fmt.Errorf("announce: %w", err)
		}
		if p.replay == nil {
			continue
		}
		if _, err := fmt.Fprintf(out, "vllm-sim KV event replay on tcp://%s\n", p.replay.Addr()); err != nil {
			return fmt.Errorf("announce: %w", err)
		}
	}
	return serve(ctx, o, out, events)
}

// serve runs the engines and the HTTP server until ctx ends, engine e
// publishing its KV-cache events to events[e] unless events is nil. It
// returns once the engines have stopped.
func serve(ctx context.Context, o *Options, out io.Writer, events []*eventPublisher) error {
	var engines []*engine.Engine
	for e := range o.engines() {
		engOpts := []engine.Option{engine.WithPacer(&engine.WallPacer{Scale: o.TimeScale})}
		if events != nil {
			engOpts = append(engOpts, engine.WithEvents(events[e].publish))
			if o.KVEventsWhen == EventsWhenScheduled {
				engOpts = append(engOpts, engine.WhenScheduled())
			}
		}
		eng, err := engine.New(o.engineConfig(), engOpts...)
		if err != nil {
			return err
		}
		engines = append(engines, eng)
	}
	srv, err := server.New(server.Config{
		Model:            o.Model,
		ServedModelNames: o.ServedModelNames,
		LoRAModules:      o.LoRAModules,
		Engines:          engines,
		FirstRank:        o.DataParallelStartRank,
		Faults:           faults.NewState(o.Faults, o.Seed),
		DefaultMaxTokens: o.DefaultMaxTokens,
		MaxTokensCap:     o.MaxTokensCap,
		PrefillTimeout:   o.PrefillTimeout,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var handler http.Handler = srv
	if o.DataParallelRankPorts > 1 {
		handler = server.DataParallelSidecar(srv, o.Host, o.Port, o.DataParallelRankPorts)
	}
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	rpc, err := listenGRPC(o, srv, out)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer rpc.stop()

	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, eng := range engines {
		wg.Go(func() { eng.Run(engineCtx) })
	}
	defer wg.Wait()
	defer stopEngine()

	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	if _, err := fmt.Fprintf(out, "vllm-sim listening on http://%s\n", ln.Addr()); err != nil {
		_ = httpSrv.Close()
		if serr := <-serveErr; !errors.Is(serr, http.ErrServerClosed) {
			return errors.Join(fmt.Errorf("announce: %w", err), fmt.Errorf("serve: %w", serr))
		}
		return fmt.Errorf("announce: %w", err)
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Stopping the engine ends every stream in flight; stalled ones hold
	// their connection until the grace period closes it.
	stopEngine()
	rpc.stop()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		_ = httpSrv.Close()
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// grpcServing is the gRPC API being served, if any.
type grpcServing struct {
	srv    *grpc.Server
	served chan struct{}
	once   sync.Once
}

// listenGRPC serves srv's gRPC API on --grpc-port, unless it is NoGRPC,
// and announces it on out.
func listenGRPC(o *Options, srv *server.Server, out io.Writer) (*grpcServing, error) {
	g := &grpcServing{}
	if o.GRPCPort == NoGRPC {
		return g, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.GRPCPort)))
	if err != nil {
		return nil, fmt.Errorf("listen gRPC: %w", err)
	}
	g.srv, g.served = srv.NewGRPC(), make(chan struct{})
	go func() { defer close(g.served); _ = g.srv.Serve(ln) }()
	if _, err := fmt.Fprintf(out, "vllm-sim gRPC listening on %s\n", ln.Addr()); err != nil {
		g.stop()
		return nil, fmt.Errorf("announce: %w", err)
	}
	return g, nil
}

// stop ends the calls in flight within the shutdown grace, then closes
// the listener and every connection. It may be called more than once.
func (g *grpcServing) stop() {
	if g.srv == nil {
		return
	}
	g.once.Do(func() {
		graceful := make(chan struct{})
		go func() { defer close(graceful); g.srv.GracefulStop() }()
		select {
		case <-graceful:
		case <-time.After(shutdownGrace):
			g.srv.Stop()
			<-graceful
		}
		<-g.served
	})
}
