package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/arbiter-run/arbiter/traces"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// runTraces exports a span per step to an OTLP/HTTP endpoint until ctx
// ends: thin wiring over traces.New with the SDK's batching exporter.
func runTraces(ctx context.Context, args []string, out io.Writer) error {
	var endpoint string
	var fromStart bool
	c, _, err := setup(ctx, "traces", args, func(fs *flag.FlagSet) {
		fs.StringVar(&endpoint, "otlp", "", "OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces")
		fs.BoolVar(&fromStart, "from-start", false, "trace every run in the log, not only what happens from now on")
	})
	if err != nil {
		return err
	}
	defer c.close()
	if endpoint == "" {
		return usageError{"--otlp URL is required: where the spans go"}
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return fmt.Errorf("traces: exporter for %s: %w", endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("arbiter"))))
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx) // flushes what is batched
	}()
	tr, err := traces.New(traces.Config{Log: c.log, Tracer: tp.Tracer("github.com/arbiter-run/arbiter/traces"), FromStart: fromStart})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "exporting a span per step to %s\n", endpoint)
	return tr.Run(ctx)
}
