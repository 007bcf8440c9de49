package main

import (
	"context"
	"errors"
	"io"

	"github.com/arbiter-run/arbiter/rules/rulescmd"
)

// runPolicy is `arbiter policy check|test|diff`: see package rulescmd.
func runPolicy(ctx context.Context, args []string, out io.Writer) error {
	err := rulescmd.Run(ctx, args, out)
	var ue *rulescmd.UsageError
	if errors.As(err, &ue) {
		return usageError{ue.Msg}
	}
	return err
}
