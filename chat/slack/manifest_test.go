package slack_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"acpbroker/chat/slack"
)

// scopes are the bot scopes each Web API method the app calls needs (the
// history scopes for conversations.replies are each a kind of
// conversation's).
var scopes = map[string][]string{
	"auth.test":                    nil,
	"chat.postMessage":             {"chat:write"},
	"chat.update":                  {"chat:write"},
	"chat.delete":                  {"chat:write"},
	"chat.postEphemeral":           {"chat:write"},
	"reactions.add":                {"reactions:write"},
	"reactions.remove":             {"reactions:write"},
	"reactions.get":                {"reactions:read"},
	"conversations.replies":        {"channels:history", "groups:history", "im:history", "mpim:history", "metadata.message:read"},
	"users.info":                   {"users:read"},
	"usergroups.users.list":        {"usergroups:read"},
	"views.open":                   nil,
	"files.getUploadURLExternal":   {"files:write"},
	"files.completeUploadExternal": {"files:write"},
	"file":                         {"files:read"}, // a shared file's download
}

// The app manifest in packaging/ creates an app that can do what the
// broker does: every scope its calls need, every event it takes
// (messages in each kind of conversation, mentions, 🛑), interactivity,
// Socket Mode, the slash command, and direct messages with the app.
func TestManifest_GrantsWhatTheAppUses(t *testing.T) {
	raw, err := os.ReadFile("../../packaging/slack-app-manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Features struct {
			AppHome struct {
				MessagesTab         bool `json:"messages_tab_enabled"`
				MessagesTabReadOnly bool `json:"messages_tab_read_only_enabled"`
			} `json:"app_home"`
			SlashCommands []struct {
				Command string `json:"command"`
			} `json:"slash_commands"`
		} `json:"features"`
		OAuth struct {
			Scopes struct {
				Bot []string `json:"bot"`
			} `json:"scopes"`
		} `json:"oauth_config"`
		Settings struct {
			Events struct {
				Bot []string `json:"bot_events"`
			} `json:"event_subscriptions"`
			Interactivity struct {
				Enabled bool `json:"is_enabled"`
			} `json:"interactivity"`
			SocketMode bool `json:"socket_mode_enabled"`
		} `json:"settings"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for method, need := range scopes {
		for _, s := range need {
			if !slices.Contains(m.OAuth.Scopes.Bot, s) {
				t.Errorf("%s needs %s, which the manifest does not ask", method, s)
			}
		}
	}
	for _, ev := range []string{"app_mention", "message.channels", "message.groups", "message.im", "message.mpim", "reaction_added"} {
		if !slices.Contains(m.Settings.Events.Bot, ev) {
			t.Errorf("the manifest does not subscribe to %s", ev)
		}
	}
	if !slices.Contains(m.OAuth.Scopes.Bot, "commands") || len(m.Features.SlashCommands) != 1 || m.Features.SlashCommands[0].Command != slack.DefaultCommand {
		t.Errorf("the slash command: %+v", m.Features.SlashCommands)
	}
	if !m.Settings.Interactivity.Enabled || !m.Settings.SocketMode || !m.Features.AppHome.MessagesTab || m.Features.AppHome.MessagesTabReadOnly {
		t.Errorf("settings %+v, app home %+v", m.Settings, m.Features.AppHome)
	}
}

// Every Web API method the app calls in a conversation is one the
// manifest's scopes cover.
func TestManifest_CoversTheCallsOfAConversation(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "resource-link notes.txt")
	h.answer(c, "✅")
	h.srv.Await("the file shared", func() bool { return len(h.srv.CallsTo("files.completeUploadExternal")) > 0 })
	h.command(c, h.alice, "status")
	h.whispered(h.alice, "*State*")
	for _, call := range h.srv.Calls() {
		if _, ok := scopes[call.Method]; !ok && call.Method != "apps.connections.open" && call.Method != "upload" {
			t.Errorf("the app called %s, whose scope the manifest test does not know", call.Method)
		}
	}
}
