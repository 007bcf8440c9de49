package console_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/console"
	"github.com/arbiter-run/arbiter/projector"
)

// TestList_PagesNewestFirst: across shards, pages of the list hold every
// run once, newest first, and the last page has no cursor.
func TestList_PagesNewestFirst(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			e := newEnv(t, envConfig{shards: shards, pageSize: 3})
			var made []string
			for i := range 8 {
				run := fmt.Sprintf("run-%02d", i)
				if i%3 == 0 {
					e.pause(t, run, `{"note":"x"}`)
				} else {
					e.complete(t, run, []string{"a", "b"}[i%2])
				}
				made = append(made, run)
			}
			var got []string
			cur := ""
			for pages := 0; ; pages++ {
				if pages > 5 {
					t.Fatalf("more than 5 pages of 3 for 8 runs: %v", got)
				}
				p, err := e.console.List(t.Context(), client.Filter{}, cur)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Rows) > 3 {
					t.Fatalf("page of %d rows, want at most 3", len(p.Rows))
				}
				for _, r := range p.Rows {
					if r.Err != nil {
						t.Fatalf("row %s: %v", r.ID, r.Err)
					}
					got = append(got, r.ID)
				}
				if p.Next == "" {
					break
				}
				cur = p.Next
			}
			want := make([]string, len(made))
			for i, r := range made {
				want[len(made)-1-i] = r
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("listed %v, want %v", got, want)
			}
		})
	}
}

func TestList_Filters(t *testing.T) {
	e := newEnv(t, envConfig{shards: 2, pageSize: 2})
	e.complete(t, "done-a1", "a")
	e.pause(t, "wait-1", `{"note":"x"}`)
	e.complete(t, "done-b1", "b")
	e.complete(t, "done-a2", "a")
	e.pause(t, "wait-2", `{"note":"x"}`)
	all := func(f client.Filter) []string {
		t.Helper()
		var ids []string
		cur := ""
		for range 10 {
			p, err := e.console.List(t.Context(), f, cur)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Rows {
				ids = append(ids, r.ID)
			}
			if cur = p.Next; cur == "" {
				return ids
			}
		}
		t.Fatalf("filter %+v: more than 10 pages", f)
		return nil
	}
	for _, c := range []struct {
		f    client.Filter
		want string
	}{
		{client.Filter{Status: projector.Completed}, "done-a2 done-b1 done-a1"},
		{client.Filter{Status: projector.Waiting}, "wait-2 wait-1"},
		{client.Filter{Agent: "a"}, "done-a2 done-a1"},
		{client.Filter{Status: projector.Completed, Agent: "b"}, "done-b1"},
		{client.Filter{Status: projector.Failed}, ""},
	} {
		if got := strings.Join(all(c.f), " "); got != c.want {
			t.Errorf("filter %+v: %q, want %q", c.f, got, c.want)
		}
	}
	if _, err := e.console.List(t.Context(), client.Filter{Status: "NOPE"}, ""); !errors.Is(err, console.ErrBadRequest) {
		t.Errorf("unknown status: %v, want ErrBadRequest", err)
	}
	if _, err := e.console.List(t.Context(), client.Filter{}, "12"); !errors.Is(err, console.ErrBadRequest) {
		t.Errorf("cursor for 1 shard on a 2-shard log: %v, want ErrBadRequest", err)
	}
	// The page renders the filter's result.
	c := e.client(t)
	code, body := get(t, c, e.base+"/?status=WAITING_FOR_APPROVAL")
	if code != http.StatusOK || !strings.Contains(body, "wait-2") || strings.Contains(body, "done-a1") {
		t.Errorf("filtered page: %d\n%s", code, body)
	}
}

// TestList_SinceUntil: the time filters select by creation, newest first,
// also on an end status, whose index is in order of ending.
func TestList_SinceUntil(t *testing.T) {
	e := newEnv(t, envConfig{pageSize: 2})
	e.pause(t, "old-wait", `{"note":"x"}`) // created first, ended last
	e.complete(t, "old", "a")
	mid := time.Now()
	e.complete(t, "new-1", "a")
	e.complete(t, "new-2", "a")
	// The oldest run ends last: granted now, it completes.
	r, err := e.d.Load(t.Context(), "old-wait")
	if err != nil {
		t.Fatal(err)
	}
	view := r.View()
	ap := view.PendingApproval()
	if _, err := e.console.Decide(t.Context(), "old-wait", ap.ID, "grant", ap.Hash, ""); err != nil {
		t.Fatal(err)
	}
	e.resume(t, "old-wait", `{"note":"x"}`)
	list := func(f client.Filter) string {
		t.Helper()
		var ids []string
		cur := ""
		for range 10 {
			p, err := e.console.List(t.Context(), f, cur)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Rows {
				ids = append(ids, r.ID)
			}
			if cur = p.Next; cur == "" {
				break
			}
		}
		return strings.Join(ids, " ")
	}
	if got := list(client.Filter{Since: mid}); got != "new-2 new-1" {
		t.Errorf("since mid: %q, want %q", got, "new-2 new-1")
	}
	if got := list(client.Filter{Until: mid}); got != "old old-wait" {
		t.Errorf("until mid: %q, want %q", got, "old old-wait")
	}
	// In order of ending: old-wait, new-2, new-1, old.
	if got := list(client.Filter{Status: projector.Completed, Since: mid}); got != "new-2 new-1" {
		t.Errorf("completed since mid: %q, want %q", got, "new-2 new-1")
	}
	if got := list(client.Filter{Status: projector.Completed, Until: mid}); got != "old-wait old" {
		t.Errorf("completed until mid: %q, want %q", got, "old-wait old")
	}
}
