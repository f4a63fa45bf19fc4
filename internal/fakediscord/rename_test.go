package fakediscord_test

import (
	"net/http"
	"strings"
	"testing"

	"acpbroker/internal/fakediscord"

	"github.com/bwmarrin/discordgo"
)

// The bot renames a thread it started, within Discord's bounds on the
// name and its limit of two renames per ten minutes; a channel it does
// not own is refused.
func TestModifyChannel_RenamesTheBotsThreadWithinDiscordsLimits(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	s := openBot(t, srv, allIntents, nil)
	th, err := s.ThreadStart(channelID, "first", discordgo.ChannelTypeGuildPublicThread, 1440)
	if err != nil {
		t.Fatal(err)
	}
	// By hand: discordgo would wait out the ten minutes itself.
	rename := func(id, name string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPatch, srv.APIURL()+"channels/"+id, strings.NewReader(`{"name":"`+name+`"}`))
		req.Header.Set("Authorization", "Bot "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := rename(channelID, "mine"); code != http.StatusForbidden {
		t.Fatalf("renaming a channel: %d", code)
	}
	if code := rename(th.ID, strings.Repeat("x", 101)); code != 400 {
		t.Fatalf("a 101-character name: %d", code)
	}
	if code := rename(th.ID, "Fix the build"); code != 200 {
		t.Fatalf("rename: %d", code)
	}
	if code := rename(th.ID, "third"); code != http.StatusTooManyRequests {
		t.Fatalf("third rename within ten minutes: %d", code)
	}
	if c, _ := srv.Channel(th.ID); c.Name != "Fix the build" || c.Renames != 1 {
		t.Fatalf("thread = %+v", c)
	}
}
