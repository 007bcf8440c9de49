package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/jsonform"
)

// render turns a call's result into the observation the model reads: text
// as it is, images, audio and resources by reference (their type, size and
// URI, never their bytes), and the structured content as JSON when no text
// carries it. The driver cuts the observation to its size limit.
func render(res *sdk.CallToolResult) string {
	var parts []string
	texts := 0
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
			texts++
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %q %s]", c.URI, c.Name, c.MIMEType))
		case *sdk.EmbeddedResource:
			if r := c.Resource; r != nil {
				parts = append(parts, fmt.Sprintf("[resource %s %s, %d bytes]", r.URI, r.MIMEType, len(r.Text)+len(r.Blob)))
			}
		default:
			parts = append(parts, fmt.Sprintf("[%T content]", c))
		}
	}
	if res.StructuredContent != nil && texts == 0 {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			if canon, err := jsonform.PolicyJSON(b); err == nil {
				parts = append(parts, string(canon))
			}
		}
	}
	return strings.Join(parts, "\n")
}
