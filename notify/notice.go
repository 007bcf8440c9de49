package notify

import (
	"strings"
	"time"
	"unicode"
)

// Notice is what a notifier says of one approval request.
type Notice struct {
	// Delivery identifies the notice: the approval's id. A receiver that
	// sees one twice drops the second.
	Delivery string     `json:"delivery"`
	Run      string     `json:"run"`
	Approval string     `json:"approval"`
	Kind     string     `json:"kind"`
	Tool     string     `json:"tool"`
	Reason   string     `json:"reason"`
	Hash     string     `json:"hash"`
	Time     time.Time  `json:"requested"`
	Expires  *time.Time `json:"expires,omitempty"`
	// URL is the console's page of the run, when the notifier knows the
	// console's address.
	URL string `json:"url,omitempty"`
}

// maxText bounds each model-chosen field of a notice.
const maxText = 300

// neutral returns s as plain text that no chat renders as a mention, a
// link or markup: Slack's control characters (&, <, >) are escaped, so
// <!channel>, <@U…> and <url|label> stay text; the characters of
// formatting (*, _, ~, `) and of links (://, www.) are broken with a zero
// width space or replaced by look-alikes; @ is followed by a zero width
// space so @here and @channel match nothing; control characters become
// spaces; and it is cut to maxText runes.
func neutral(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == maxText {
			b.WriteString("…")
			break
		}
		n++
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '`':
			b.WriteRune('ˋ')
		case r == '*' || r == '_' || r == '~' || r == '|':
			b.WriteRune(r)
			b.WriteRune('\u200b')
		case r == '@' || r == '#' || r == ':' || r == '.':
			b.WriteRune(r)
			b.WriteRune('\u200b')
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			b.WriteRune(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
