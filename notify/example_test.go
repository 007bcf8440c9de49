package notify_test

import (
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/notify"
)

// A receiver checks a JSON notice's signature over the exact body it got,
// and refuses one signed too long ago (a replay). The MAC here was checked
// independently with Python's hmac module.
func ExampleVerify() {
	secret := []byte("a shared secret of 16+ bytes")
	body := []byte(`{"delivery":"01JAPPROVAL","run":"run-1"}`)
	sent := time.Date(2030, 3, 4, 5, 6, 7, 0, time.UTC)
	header := notify.Sign(secret, sent, body)
	fmt.Println(header)
	fmt.Println(notify.Verify(secret, header, body, sent.Add(10*time.Second), time.Minute))
	fmt.Println(notify.Verify(secret, header, body, sent.Add(time.Hour), time.Minute))
	// Output:
	// t=1898831167,v1=3c971179b0bec5f3ad9252b43ed23a7c13d8aebd3c3ddd148676514e5e44da57
	// <nil>
	// notice timestamp outside the tolerance: signed 1h0m0s from now (tolerance 1m0s)
}
