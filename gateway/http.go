package gateway

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrNoToken: the HTTP handler needs a bearer token.
var ErrNoToken = errors.New("gateway over HTTP needs a bearer token")

// HTTP returns a streamable HTTP handler for the gateway's server that
// answers only requests with "Authorization: Bearer <token>" (401
// otherwise). An empty token is [ErrNoToken]: the gateway runs calls with
// the gateway's rights, so nobody reaches it unnamed.
func (g *Gateway) HTTP(token string) (http.Handler, error) {
	if token == "" {
		return nil, ErrNoToken
	}
	srv := g.Server()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="arbiter-gateway"`)
			http.Error(w, fmt.Sprintf("%d unauthorized: send Authorization: Bearer <token>", http.StatusUnauthorized), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}
