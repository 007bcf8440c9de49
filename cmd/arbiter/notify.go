package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/notify"
)

// runNotify follows approval requests and posts a notice of each until ctx
// ends: thin wiring over notify.New. It connects as the worker user, whose
// permissions include the consumers notifiers share.
func runNotify(ctx context.Context, args []string, out io.Writer) error {
	var webhook, secretFile, slack, consoleURL, durable string
	a, h := helpOf("notify")
	fs := newFlags("notify", a, h)
	c := &conn{role: "worker"}
	c.flags(fs)
	{
		fs.StringVar(&webhook, "webhook", "", "URL of a JSON webhook; notices are signed with --secret-file")
		fs.StringVar(&secretFile, "secret-file", "", "file holding the webhook's HMAC-SHA256 secret (at least 16 bytes)")
		fs.StringVar(&slack, "slack", "", "URL of a Slack-compatible incoming webhook")
		fs.StringVar(&consoleURL, "console", "", "the console's URL as `arbiter console` prints it for notices (http://127.0.0.1:7788/c/…), linked from each notice")
		fs.StringVar(&durable, "durable", layout.NotifyConsumer, "consumer name shared by every notifier that must not repeat another's notices")
	}
	if _, err := parse(fs, args); err != nil {
		return err
	}
	var eps []notify.Endpoint
	if webhook != "" {
		if secretFile == "" {
			return usageError{"--webhook needs --secret-file: JSON notices are signed"}
		}
		s, err := os.ReadFile(secretFile)
		if err != nil {
			return err
		}
		eps = append(eps, notify.Endpoint{Name: "webhook", URL: webhook, Format: notify.JSON, Secret: []byte(strings.TrimSpace(string(s)))})
	}
	if slack != "" {
		eps = append(eps, notify.Endpoint{Name: "slack", URL: slack, Format: notify.Slack})
	}
	if len(eps) == 0 {
		return usageError{"give --webhook URL --secret-file F, or --slack URL, or both"}
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	defer c.close()
	n, err := notify.New(notify.Config{Log: c.log, Endpoints: eps, ConsoleURL: strings.TrimSuffix(consoleURL, "/"), Durable: durable,
		Report: func(err error) { fmt.Fprintf(out, "%s %v\n", time.Now().UTC().Format(time.RFC3339), err) }})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "notifying %d endpoint(s) of approval requests\n", len(eps))
	return n.Run(ctx)
}
