package fakediscord_test

import (
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"

	"github.com/bwmarrin/discordgo"
)

// An option registered with autocomplete gets type 4 interactions as the
// user types, the focused option marked and its text as typed; the bot
// answers with at most 25 choices (type 8), which only such interactions
// take, and a type 4 interaction takes nothing else.
func TestAutocomplete(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	answered := make(chan error, 4)
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		s.AddHandler(func(s *discordgo.Session, i *discordgo.InteractionCreate) {
			if i.Type != discordgo.InteractionApplicationCommandAutocomplete {
				return
			}
			d := i.ApplicationCommandData()
			var typed, other string
			for _, o := range d.Options {
				if o.Focused {
					typed = o.StringValue()
				} else {
					other = o.StringValue()
				}
			}
			if typed == "wrong" {
				answered <- s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
					Data: &discordgo.InteractionResponseData{Content: "not a result"}})
				return
			}
			n := 2
			if typed == "many" {
				n = 26
			}
			var choices []*discordgo.ApplicationCommandOptionChoice
			for k := range n {
				choices = append(choices, &discordgo.ApplicationCommandOptionChoice{Name: other + typed + strings.Repeat("!", k), Value: typed})
			}
			answered <- s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionApplicationCommandAutocompleteResult,
				Data: &discordgo.InteractionResponseData{Choices: choices}})
		})
	})
	cmds := []*discordgo.ApplicationCommand{{Name: "config", Description: "Set an option", Options: []*discordgo.ApplicationCommandOption{
		{Type: discordgo.ApplicationCommandOptionString, Name: "option", Description: "Which", Required: true, Autocomplete: true},
		{Type: discordgo.ApplicationCommandOptionString, Name: "value", Description: "To what", Autocomplete: true},
	}}}
	if _, err := s.ApplicationCommandBulkOverwrite(s.State.User.ID, guildID, cmds); err != nil {
		t.Fatal(err)
	}
	bad := []*discordgo.ApplicationCommand{{Name: "bad", Description: "x", Options: []*discordgo.ApplicationCommandOption{
		{Type: discordgo.ApplicationCommandOptionBoolean, Name: "b", Description: "x", Autocomplete: true}}}}
	if _, err := s.ApplicationCommandBulkOverwrite(s.State.User.ID, guildID, bad); err == nil {
		t.Error("autocomplete on a boolean option was accepted")
	}
	wait := func() error {
		t.Helper()
		select {
		case err := <-answered:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the autocomplete was not answered")
			return nil
		}
	}

	id := srv.Autocomplete(channelID, alice.ID, "config", map[string]any{"option": "model", "value": "fa"}, "value")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if in, _ := srv.Interaction(id); in.Type != 4 || in.Name != "config" {
		t.Errorf("interaction = %+v", in)
	}
	choices, ok := srv.AutocompleteChoices(id)
	if !ok || len(choices) != 2 || choices[0].Name != "modelfa" || choices[0].Value != "fa" {
		t.Errorf("choices = %+v, %v", choices, ok)
	}

	id = srv.Autocomplete(channelID, alice.ID, "config", map[string]any{"option": "many"}, "option")
	if err := wait(); err == nil {
		t.Error("26 choices were accepted")
	}
	if _, ok := srv.AutocompleteChoices(id); ok {
		t.Error("a refused result counts as an answer")
	}
	srv.Autocomplete(channelID, alice.ID, "config", map[string]any{"option": "wrong"}, "option")
	if err := wait(); err == nil {
		t.Error("a message answered an autocomplete")
	}
	if msgs := srv.Messages(channelID); len(msgs) != 0 {
		t.Errorf("messages = %+v", msgs)
	}
}
