package fakediscord_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"

	"github.com/bwmarrin/discordgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests mostly wait (discordgo's Session.Close alone sleeps a
	// second), so unless -test.parallel is given they run more at once
	// than the default of GOMAXPROCS.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "8")
	}
	// Every goroutine, the server's and discordgo's, must be gone once
	// the sessions and servers are closed.
	goleak.VerifyTestMain(m)
}

const (
	guildID   = "1000"
	channelID = "2000"
	token     = "test-token"
)

var alice = fakediscord.User{ID: "3001", Username: "alice"}

const allIntents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages |
	discordgo.IntentsGuildMessageReactions | discordgo.IntentsMessageContent

func newServer(t *testing.T, opts fakediscord.Options) *fakediscord.Server {
	t.Helper()
	opts.Token = token
	srv := fakediscord.New(t, opts)
	srv.AddChannel(guildID, channelID, "general")
	return srv
}

// openBot opens a discordgo session against srv; setup runs before Open
// (to add handlers). The session is closed by the test's cleanup, before
// the server.
func openBot(t *testing.T, srv *fakediscord.Server, intents discordgo.Intent, setup func(*discordgo.Session)) *discordgo.Session {
	t.Helper()
	s, err := discordgo.New("Bot " + token)
	if err != nil {
		t.Fatal(err)
	}
	s.Client = srv.HTTPClient()
	s.Identify.Intents = intents
	// Handlers run in discordgo's reading goroutine, in event order, so
	// that they can copy what they need before discordgo's state code
	// reuses the event's objects.
	s.SyncEvents = true
	if setup != nil {
		setup(s)
	}
	beats := srv.Stats().Heartbeats
	if err := s.Open(); err != nil {
		t.Fatalf("Open: %v", err)
	}
	// discordgo's heartbeat goroutine beats at once; once it has, it
	// waits for its ticker or for the session to close. A close that
	// catches it anywhere else (as when the server drops the connection
	// right after Open) makes it fail on the dead connection and start a
	// second, concurrent reconnect.
	srv.Await("the first heartbeat", func() bool { return srv.Stats().Heartbeats > beats })
	t.Cleanup(func() {
		// Close sleeps a second holding the session's lock; a heartbeat
		// falling due meanwhile fails on the closed connection and
		// starts a reconnect loop that Close does not stop. Turning
		// reconnection off first keeps that loop from outliving the test.
		s.ShouldReconnectOnError = false
		s.Close()
	})
	return s
}

// events subscribes to one event type; the channel drops events when
// full rather than block discordgo.
func events[T any](s *discordgo.Session) <-chan T {
	ch := make(chan T, 64)
	s.AddHandler(func(_ *discordgo.Session, e T) {
		select {
		case ch <- e:
		default:
		}
	})
	return ch
}

func recv[T any](t *testing.T, ch <-chan T, match func(T) bool) T {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-ch:
			if match == nil || match(e) {
				return e
			}
		case <-timeout:
			var zero T
			t.Fatalf("timed out waiting for %T", zero)
			return zero
		}
	}
}

func restCode(t *testing.T, err error) (status, code int) {
	t.Helper()
	var re *discordgo.RESTError
	if !errors.As(err, &re) {
		t.Fatalf("want a REST error, got %v", err)
	}
	if re.Message != nil {
		code = re.Message.Code
	}
	return re.Response.StatusCode, code
}

func TestReadyAndGuildState(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	type readyInfo struct {
		userID, appID, sessionID string
		bot                      bool
		guilds                   []string
		unavailable              bool
	}
	type guildInfo struct {
		id       string
		channels []string
	}
	ready := make(chan readyInfo, 1)
	guilds := make(chan guildInfo, 1)
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		s.AddHandler(func(_ *discordgo.Session, r *discordgo.Ready) {
			ri := readyInfo{userID: r.User.ID, appID: r.Application.ID, sessionID: r.SessionID, bot: r.User.Bot, unavailable: true}
			for _, g := range r.Guilds {
				ri.guilds = append(ri.guilds, g.ID)
				ri.unavailable = ri.unavailable && g.Unavailable
			}
			ready <- ri
		})
		s.AddHandler(func(_ *discordgo.Session, g *discordgo.GuildCreate) {
			gi := guildInfo{id: g.ID}
			for _, c := range g.Channels {
				gi.channels = append(gi.channels, c.ID)
			}
			guilds <- gi
		})
	})
	r := recv(t, ready, nil)
	if r.userID != srv.Bot().ID || !r.bot || r.appID != srv.ApplicationID() || r.sessionID == "" {
		t.Errorf("READY = %+v", r)
	}
	if len(r.guilds) != 1 || r.guilds[0] != guildID || !r.unavailable {
		t.Errorf("READY guilds = %+v (want one unavailable guild)", r.guilds)
	}
	if g := recv(t, guilds, nil); g.id != guildID || len(g.channels) != 1 || g.channels[0] != channelID {
		t.Errorf("GUILD_CREATE = %+v", g)
	}
	srv.Await("state to hold the channel", func() bool {
		c, err := s.State.Channel(channelID)
		return err == nil && c.Name == "general"
	})
	st := srv.Stats()
	if st.Identifies != 1 || !st.Connected || st.Intents != int64(allIntents) || !st.Compress {
		t.Errorf("stats = %+v", st)
	}
	if !strings.Contains(st.Query, "encoding=json") {
		t.Errorf("gateway query = %q", st.Query)
	}
	u, err := s.User("@me")
	if err != nil || u.ID != srv.Bot().ID {
		t.Errorf("GET /users/@me = %+v, %v", u, err)
	}
	srv.SetRoles(guildID, alice.ID, "900")
	m, err := s.GuildMember(guildID, alice.ID)
	if err != nil || len(m.Roles) != 1 || m.Roles[0] != "900" || m.User.ID != alice.ID {
		t.Errorf("GET member = %+v, %v", m, err)
	}
}

func TestMessageCreateReachesHandler(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var created <-chan *discordgo.MessageCreate
	openBot(t, srv, allIntents, func(s *discordgo.Session) { created = events[*discordgo.MessageCreate](s) })

	content := srv.Bot().Mention() + " look at this"
	id := srv.SendMessage(channelID, alice, content,
		fakediscord.WithRoles("777"),
		fakediscord.WithAttachment("notes.txt", "", []byte("hello file")))
	m := recv(t, created, nil)
	if m.ID != id || m.ChannelID != channelID || m.GuildID != guildID || m.Content != content || m.Author.ID != alice.ID {
		t.Fatalf("MESSAGE_CREATE = %+v", m.Message)
	}
	if len(m.Mentions) != 1 || m.Mentions[0].ID != srv.Bot().ID {
		t.Errorf("mentions = %+v", m.Mentions)
	}
	if m.Member == nil || len(m.Member.Roles) != 1 || m.Member.Roles[0] != "777" {
		t.Errorf("member = %+v", m.Member)
	}
	if len(m.Attachments) != 1 || m.Attachments[0].Filename != "notes.txt" || m.Attachments[0].Size != 10 {
		t.Fatalf("attachments = %+v", m.Attachments)
	}
	resp, err := srv.HTTPClient().Get(m.Attachments[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != "hello file" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("attachment download = %q (%s)", data, resp.Header.Get("Content-Type"))
	}
}

func TestMessageContentNeedsIntent(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var created <-chan *discordgo.MessageCreate
	openBot(t, srv, discordgo.IntentsAllWithoutPrivileged, func(s *discordgo.Session) {
		created = events[*discordgo.MessageCreate](s)
	})
	plain := srv.SendMessage(channelID, alice, "secret words")
	if m := recv(t, created, nil); m.ID != plain || m.Content != "" {
		t.Errorf("without MESSAGE_CONTENT, got content %q", m.Content)
	}
	mention := srv.SendMessage(channelID, alice, srv.Bot().Mention()+" hi")
	if m := recv(t, created, nil); m.ID != mention || m.Content == "" {
		t.Errorf("a mention of the bot must carry its content, got %q", m.Content)
	}
}

func TestSendEditDelete(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var created <-chan *discordgo.MessageCreate
	var updated <-chan *discordgo.MessageUpdate
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		created = events[*discordgo.MessageCreate](s)
		updated = events[*discordgo.MessageUpdate](s)
	})

	sent, err := s.ChannelMessageSendComplex(channelID, &discordgo.MessageSend{
		Content: "first",
		Files: []*discordgo.File{
			{Name: "answer.md", ContentType: "text/markdown", Reader: strings.NewReader("# long answer")},
			{Name: "b.bin", Reader: bytes.NewReader([]byte{1, 2, 3})},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sent.Author.ID != srv.Bot().ID || sent.GuildID != "" || len(sent.Attachments) != 2 {
		t.Errorf("created = %+v", sent)
	}
	if echo := recv(t, created, nil); echo.ID != sent.ID || echo.Author.ID != srv.Bot().ID {
		t.Errorf("echo of own message = %+v", echo.Message)
	}
	got, ok := srv.Message(channelID, sent.ID)
	if !ok || got.Content != "first" || len(got.Attachments) != 2 ||
		string(got.Attachments[0].Data) != "# long answer" || got.Attachments[1].Size != 3 {
		t.Fatalf("stored = %+v", got)
	}
	reqs := srv.RequestsTo(fakediscord.RouteCreateMessage)
	if len(reqs) != 1 || len(reqs[0].Files) != 2 || reqs[0].Files[0].Field != "files[0]" {
		t.Errorf("recorded request = %+v", reqs)
	}

	content := "second"
	edit := discordgo.NewMessageEdit(channelID, sent.ID)
	edit.Content = &content
	edit.Components = &[]discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
		discordgo.Button{Label: "Stop", Style: discordgo.DangerButton, CustomID: "stop"},
	}}}
	edited, err := s.ChannelMessageEditComplex(edit)
	if err != nil {
		t.Fatal(err)
	}
	if edited.Content != "second" || edited.EditedTimestamp == nil || len(edited.Components) != 1 {
		t.Errorf("edited = %+v", edited)
	}
	if u := recv(t, updated, nil); u.ID != sent.ID || u.Content != "second" {
		t.Errorf("MESSAGE_UPDATE = %+v", u.Message)
	}
	if e := srv.Edits(channelID, sent.ID); len(e) != 1 || e[0].Content != "second" {
		t.Errorf("edits = %+v", e)
	}
	got, _ = srv.Message(channelID, sent.ID)
	if b := got.Buttons(); len(b) != 1 || b[0].CustomID != "stop" || got.Edits != 1 || len(got.Attachments) != 2 {
		t.Errorf("after edit = %+v, buttons %+v", got, b)
	}
	fetched, err := s.ChannelMessage(channelID, sent.ID)
	if err != nil || fetched.Content != "second" {
		t.Errorf("GET message = %+v, %v", fetched, err)
	}

	_, err = s.ChannelMessageSend(channelID, strings.Repeat("é", 2001))
	if st, code := restCode(t, err); st != 400 || code != 50035 {
		t.Errorf("2001 characters: %d %d", st, code)
	}
	_, err = s.ChannelMessageSend(channelID, "")
	if st, code := restCode(t, err); st != 400 || code != 50006 {
		t.Errorf("empty message: %d %d", st, code)
	}
	theirs := srv.SendMessage(channelID, alice, "mine")
	_, err = s.ChannelMessageEdit(channelID, theirs, "hijack")
	if st, code := restCode(t, err); st != 403 || code != 50005 {
		t.Errorf("editing another's message: %d %d", st, code)
	}

	if err := s.ChannelMessageDelete(channelID, sent.ID); err != nil {
		t.Fatal(err)
	}
	for _, m := range srv.Messages(channelID) {
		if m.ID == sent.ID {
			t.Error("deleted message still listed")
		}
	}
	if err := s.ChannelTyping(channelID); err != nil || srv.Typing(channelID) != 1 {
		t.Errorf("typing: %v, count %d", err, srv.Typing(channelID))
	}
	for _, r := range srv.Requests() {
		if r.Status == 0 || r.Route == "" {
			t.Errorf("request %s %s recorded as %d %q", r.Method, r.Path, r.Status, r.Route)
		}
	}
	if u := srv.UnknownRequests(); len(u) != 0 {
		t.Errorf("unknown routes hit: %+v", u)
	}
}

func TestThreads(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var threads <-chan *discordgo.ThreadCreate
	var created <-chan *discordgo.MessageCreate
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		threads = events[*discordgo.ThreadCreate](s)
		created = events[*discordgo.MessageCreate](s)
	})
	start := srv.SendMessage(channelID, alice, srv.Bot().Mention()+" help")
	recv(t, created, nil)

	th, err := s.MessageThreadStartComplex(channelID, start, &discordgo.ThreadStart{Name: "help", AutoArchiveDuration: 60})
	if err != nil {
		t.Fatal(err)
	}
	if th.ID != start || th.Type != discordgo.ChannelTypeGuildPublicThread || th.ParentID != channelID || th.GuildID != guildID ||
		th.ThreadMetadata == nil || th.ThreadMetadata.AutoArchiveDuration != 60 {
		t.Errorf("thread = %+v", th)
	}
	if e := recv(t, threads, nil); e.ID != th.ID || !e.NewlyCreated {
		t.Errorf("THREAD_CREATE = %+v", e)
	}
	srv.Await("state to know the thread", func() bool {
		c, err := s.State.Channel(th.ID)
		return err == nil && c.IsThread()
	})
	if _, err := s.MessageThreadStart(channelID, start, "again", 60); err == nil {
		t.Error("a second thread on one message was accepted")
	} else if st, code := restCode(t, err); st != 400 || code != 160004 {
		t.Errorf("second thread: %d %d", st, code)
	}
	if ts := srv.Threads(); len(ts) != 1 || ts[0].StarterMessageID != start {
		t.Errorf("threads = %+v", ts)
	}

	if _, err := s.ChannelMessageSend(th.ID, "working on it"); err != nil {
		t.Fatal(err)
	}
	if ms := srv.Messages(th.ID); len(ms) != 1 || ms[0].Content != "working on it" || ms[0].GuildID != guildID {
		t.Errorf("thread messages = %+v", ms)
	}
	reply := srv.SendMessage(th.ID, alice, "thanks")
	if m := recv(t, created, func(m *discordgo.MessageCreate) bool { return m.ID == reply }); m.ChannelID != th.ID {
		t.Errorf("reply in thread arrived for channel %s", m.ChannelID)
	}

	bare, err := s.ThreadStart(channelID, "bare", 0, 1440)
	if err != nil || bare.Type != discordgo.ChannelTypeGuildPrivateThread {
		t.Errorf("thread without message = %+v, %v (v9 makes it private by default)", bare, err)
	}
}

func TestReactions(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var added <-chan *discordgo.MessageReactionAdd
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) { added = events[*discordgo.MessageReactionAdd](s) })
	msg := srv.SendMessage(channelID, alice, "react to me")

	for _, e := range []string{"👀", "#️⃣", "party:123456789"} {
		if err := s.MessageReactionAdd(channelID, msg, e); err != nil {
			t.Fatalf("reaction %q: %v", e, err)
		}
	}
	for _, e := range []string{"👀", "#️⃣", "party:123456789"} {
		if !srv.HasReaction(channelID, msg, srv.Bot().ID, e) {
			t.Errorf("reaction %q not recorded: %+v", e, srv.Reactions(channelID, msg))
		}
	}
	if err := s.MessageReactionRemove(channelID, msg, "👀", "@me"); err != nil {
		t.Fatal(err)
	}
	if srv.HasReaction(channelID, msg, srv.Bot().ID, "👀") {
		t.Error("removed reaction still there")
	}
	err := s.MessageReactionAdd(channelID, msg, "thumbsup")
	if st, code := restCode(t, err); st != 400 || code != 10014 {
		t.Errorf("named emoji: %d %d", st, code)
	}

	srv.AddReaction(channelID, msg, alice.ID, "🛑")
	r := recv(t, added, func(r *discordgo.MessageReactionAdd) bool { return r.UserID == alice.ID })
	if r.MessageID != msg || r.Emoji.Name != "🛑" || r.ChannelID != channelID || r.Member == nil {
		t.Errorf("MESSAGE_REACTION_ADD = %+v", r.MessageReaction)
	}
}

func TestButtonInteraction(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	srv.AddUser(alice)
	var interactions <-chan *discordgo.InteractionCreate
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		interactions = events[*discordgo.InteractionCreate](s)
		s.AddHandler(func(s *discordgo.Session, i *discordgo.InteractionCreate) {
			if i.Type != discordgo.InteractionMessageComponent || i.MessageComponentData().CustomID != "approve" {
				return
			}
			s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{
				Type: discordgo.InteractionResponseUpdateMessage,
				Data: &discordgo.InteractionResponseData{Content: "Approved by " + i.Member.User.Username, Components: []discordgo.MessageComponent{}},
			})
		})
	})
	prompt, err := s.ChannelMessageSendComplex(channelID, &discordgo.MessageSend{
		Content: "Run `rm -rf build`?",
		Components: []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.Button{Label: "Approve", Style: discordgo.SuccessButton, CustomID: "approve"},
			discordgo.Button{Label: "Deny", Style: discordgo.DangerButton, CustomID: "deny"},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}

	id := srv.ClickButton(channelID, prompt.ID, alice.ID, "approve")
	in := recv(t, interactions, nil)
	if in.ID != id || in.Message == nil || in.Message.ID != prompt.ID || in.Member == nil || in.Member.User.ID != alice.ID || in.GuildID != guildID {
		t.Errorf("INTERACTION_CREATE = %+v", in.Interaction)
	}
	srv.Await("the response", func() bool { return len(srv.InteractionResponses(id)) == 1 })
	r := srv.InteractionResponses(id)[0]
	if r.Type != 7 || r.Status != 204 || r.Late || r.Latency > 3*time.Second {
		t.Errorf("response = %+v", r)
	}
	m, _ := srv.Message(channelID, prompt.ID)
	if m.Content != "Approved by alice" || len(m.Buttons()) != 0 {
		t.Errorf("message after update = %q, buttons %+v", m.Content, m.Buttons())
	}
	rec, _ := srv.Interaction(id)
	if rec.OriginalMessageID != prompt.ID || !rec.Acknowledged() {
		t.Errorf("interaction = %+v", rec)
	}
	err = s.InteractionRespond(in.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
	if st, code := restCode(t, err); st != 400 || code != 40060 {
		t.Errorf("second response: %d %d", st, code)
	}
}

func TestLateInteractionResponse(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{InteractionDeadline: 100 * time.Millisecond})
	var interactions <-chan *discordgo.InteractionCreate
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) { interactions = events[*discordgo.InteractionCreate](s) })
	prompt, err := s.ChannelMessageSendComplex(channelID, &discordgo.MessageSend{
		Content: "ok?",
		Components: []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.Button{Label: "OK", Style: discordgo.PrimaryButton, CustomID: "ok"},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := srv.ClickButton(channelID, prompt.ID, alice.ID, "ok")
	in := recv(t, interactions, nil)
	<-time.After(200 * time.Millisecond)
	err = s.InteractionRespond(in.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
	if st, code := restCode(t, err); st != 404 || code != 10062 {
		t.Errorf("late response: %d %d", st, code)
	}
	if r := srv.InteractionResponses(id); len(r) != 1 || !r[0].Late {
		t.Errorf("responses = %+v", r)
	}
}

func TestSlashCommands(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	done := make(chan error, 1)
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		s.AddHandler(func(s *discordgo.Session, i *discordgo.InteractionCreate) {
			if i.Type != discordgo.InteractionApplicationCommand {
				return
			}
			d := i.ApplicationCommandData()
			err := s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource})
			if err == nil {
				text := d.Name + " verbose=" + map[bool]string{true: "yes", false: "no"}[d.GetOption("verbose").BoolValue()]
				_, err = s.InteractionResponseEdit(i.Interaction, &discordgo.WebhookEdit{Content: &text})
			}
			if err == nil {
				_, err = s.FollowupMessageCreate(i.Interaction, true, &discordgo.WebhookParams{Content: "only you", Flags: discordgo.MessageFlagsEphemeral})
			}
			done <- err
		})
	})
	cmds := []*discordgo.ApplicationCommand{
		{Name: "status", Description: "Show the session", Options: []*discordgo.ApplicationCommandOption{
			{Type: discordgo.ApplicationCommandOptionBoolean, Name: "verbose", Description: "More detail"},
		}},
		{Name: "cancel", Description: "Stop the turn"},
	}
	got, err := s.ApplicationCommandBulkOverwrite(s.State.User.ID, guildID, cmds)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID == "" || got[0].Version == "" || got[0].GuildID != guildID || got[0].ApplicationID != srv.ApplicationID() {
		t.Fatalf("bulk overwrite = %+v", got)
	}
	again, err := s.ApplicationCommandBulkOverwrite(s.State.User.ID, guildID, cmds[:1])
	if err != nil || len(again) != 1 || again[0].ID != got[0].ID {
		t.Errorf("second overwrite = %+v, %v (ids are kept by name)", again, err)
	}
	if _, err := s.ApplicationCommandBulkOverwrite(s.State.User.ID, "", cmds); err != nil {
		t.Fatal(err)
	}
	if c := srv.Commands(); len(c) != 3 || c[0].GuildID != guildID || c[1].GuildID != "" {
		t.Errorf("commands = %+v", c)
	}
	_, err = s.ApplicationCommandBulkOverwrite(s.State.User.ID, guildID, []*discordgo.ApplicationCommand{{Name: "Bad Name", Description: "x"}})
	if st, code := restCode(t, err); st != 400 || code != 50035 {
		t.Errorf("invalid name: %d %d", st, code)
	}

	id := srv.SlashCommand(channelID, alice.ID, "status", map[string]any{"verbose": true})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not handled")
	}
	rec, _ := srv.Interaction(id)
	if len(rec.Responses) != 1 || rec.Responses[0].Type != 5 || rec.Responses[0].Late {
		t.Errorf("responses = %+v", rec.Responses)
	}
	orig, _ := srv.Message(channelID, rec.OriginalMessageID)
	if orig.Content != "status verbose=yes" || orig.Flags&fakediscord.FlagLoading != 0 || orig.InteractionID != id {
		t.Errorf("original = %+v", orig)
	}
	if len(rec.FollowupIDs) != 1 {
		t.Fatalf("followups = %v", rec.FollowupIDs)
	}
	if f, _ := srv.Message(channelID, rec.FollowupIDs[0]); !f.Ephemeral() || f.Content != "only you" {
		t.Errorf("followup = %+v", f)
	}
}

func TestResumeAfterDrop(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var created <-chan *discordgo.MessageCreate
	var resumed <-chan *discordgo.Resumed
	openBot(t, srv, allIntents, func(s *discordgo.Session) {
		created = events[*discordgo.MessageCreate](s)
		resumed = events[*discordgo.Resumed](s)
	})

	srv.DropGateway()
	srv.Await("the connection to drop", func() bool { return !srv.Connected() })
	away := srv.SendMessage(channelID, alice, "sent while disconnected")
	srv.Await("a resume", func() bool { st := srv.Stats(); return st.Resumes == 1 && st.Connected })
	if m := recv(t, created, nil); m.ID != away {
		t.Errorf("first message after resume = %s, want the replayed %s", m.ID, away)
	}
	recv(t, resumed, nil)
	after := srv.SendMessage(channelID, alice, "sent after")
	if m := recv(t, created, nil); m.ID != after {
		t.Errorf("got %s, want %s", m.ID, after)
	}
	if st := srv.Stats(); st.Identifies != 1 || st.Connections != 2 || st.Replayed != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestRejectedResumeReidentifies(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var ready <-chan *discordgo.Ready
	var created <-chan *discordgo.MessageCreate
	openBot(t, srv, allIntents, func(s *discordgo.Session) {
		ready = events[*discordgo.Ready](s)
		created = events[*discordgo.MessageCreate](s)
	})
	first := recv(t, ready, nil)
	srv.RejectNextResume()
	srv.DropGateway()
	second := recv(t, ready, nil)
	if second.SessionID == first.SessionID {
		t.Error("the new session kept the old id")
	}
	st := srv.Stats()
	if st.ResumesRejected != 1 || st.Identifies != 2 || st.Resumes != 0 {
		t.Errorf("stats = %+v", st)
	}
	id := srv.SendMessage(channelID, alice, "hello again")
	if m := recv(t, created, nil); m.ID != id {
		t.Errorf("got %s, want %s", m.ID, id)
	}
}

func TestReconnectRequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	openBot(t, srv, allIntents, nil)
	srv.RequestReconnect()
	srv.Await("a resume", func() bool { st := srv.Stats(); return st.Resumes == 1 && st.Connected })
	if codes := srv.Stats().ClientCloseCodes; len(codes) != 1 || codes[0] != 1012 {
		t.Errorf("client closed with %v, want [1012]", codes)
	}
}

func TestMissedHeartbeatAcks(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{HeartbeatInterval: 100 * time.Millisecond})
	openBot(t, srv, allIntents, nil)
	srv.Await("heartbeats at the configured pace", func() bool { return srv.Stats().Heartbeats >= 3 })
	srv.SetHeartbeatAcks(false)
	srv.Await("the client to give up", func() bool { return !srv.Connected() })
	srv.SetHeartbeatAcks(true)
	srv.Await("a new session", func() bool { st := srv.Stats(); return st.Identifies == 2 && st.Connected })
	// discordgo closes a connection it thinks dead with code 1000,
	// which ends the session, so its RESUME is refused.
	if st := srv.Stats(); st.ResumesRejected != 1 || len(st.ClientCloseCodes) == 0 || st.ClientCloseCodes[0] != 1000 {
		t.Errorf("stats = %+v", st)
	}
}

func TestInjected429IsRetried(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var limited <-chan *discordgo.RateLimit
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) { limited = events[*discordgo.RateLimit](s) })
	const wait = 300 * time.Millisecond
	srv.Inject429(fakediscord.OnRouteIn(fakediscord.RouteCreateMessage, channelID), 1, wait)
	start := time.Now()
	m, err := s.ChannelMessageSend(channelID, "eventually")
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < wait {
		t.Errorf("retried after %v, before retry_after %v", el, wait)
	}
	if rl := recv(t, limited, nil); rl.RetryAfter != wait {
		t.Errorf("RateLimit event retry after %v", rl.RetryAfter)
	}
	reqs := srv.RequestsTo(fakediscord.RouteCreateMessage)
	if len(reqs) != 2 || reqs[0].Status != 429 || !reqs[0].Injected || reqs[1].Status != 200 {
		t.Errorf("requests = %+v", reqs)
	}
	if got, ok := srv.Message(channelID, m.ID); !ok || got.Content != "eventually" {
		t.Errorf("message = %+v", got)
	}
}

func TestBucketsHonouredByDiscordgo(t *testing.T) {
	t.Parallel()
	per := 300 * time.Millisecond
	srv := newServer(t, fakediscord.Options{RateLimits: map[string]fakediscord.RateLimit{
		fakediscord.RouteCreateMessage: {Limit: 2, Per: per},
	}})
	s := openBot(t, srv, allIntents, nil)
	start := time.Now()
	for i := range 5 {
		if _, err := s.ChannelMessageSend(channelID, strings.Repeat("x", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 2*per {
		t.Errorf("5 messages at 2 per %v took only %v", per, el)
	}
	if rl := srv.RateLimited(); len(rl) != 0 {
		t.Errorf("a client honouring the headers got %d 429s", len(rl))
	}
	r := srv.RequestsTo(fakediscord.RouteCreateMessage)[0]
	if r.Status != 200 {
		t.Errorf("first request: %+v", r)
	}

	// A client ignoring the headers is refused.
	hc := srv.HTTPClient()
	var last *http.Response
	var lastBody []byte
	for range 3 {
		req, _ := http.NewRequest("POST", "https://discord.com/api/v9/channels/"+channelID+"/messages", strings.NewReader(`{"content":"spam"}`))
		req.Header.Set("Authorization", "Bot "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 429 {
			last, lastBody = resp, b
		}
	}
	if last == nil {
		t.Fatal("no 429 for 3 requests in a 2-request window")
	}
	for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Reset-After", "X-RateLimit-Bucket"} {
		if last.Header.Get(h) == "" {
			t.Errorf("429 without %s", h)
		}
	}
	var body struct {
		Message    string  `json:"message"`
		RetryAfter float64 `json:"retry_after"`
		Global     *bool   `json:"global"`
	}
	if err := json.Unmarshal(lastBody, &body); err != nil || body.Message == "" || body.Global == nil || *body.Global ||
		body.RetryAfter <= 0 || body.RetryAfter > per.Seconds()+0.01 {
		t.Errorf("429 body %s", lastBody)
	}
	if len(srv.RateLimited()) == 0 {
		t.Error("429 not recorded")
	}
}

func TestUnknownRouteAndForeignHost(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	s := openBot(t, srv, allIntents, nil)
	_, err := s.GuildBans(guildID, 10, "", "")
	if st, _ := restCode(t, err); st != 404 {
		t.Errorf("unknown route answered %d", st)
	}
	if u := srv.UnknownRequests(); len(u) != 1 || u[0].Path != "/guilds/"+guildID+"/bans" {
		t.Errorf("unknown = %+v", u)
	}
	if _, err := srv.HTTPClient().Get("https://example.com/"); err == nil {
		t.Error("a request to another host got through")
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{DenyPrivilegedIntents: true})
	s, _ := discordgo.New("Bot wrong")
	s.Client = srv.HTTPClient()
	if err := s.Open(); err == nil || !strings.Contains(err.Error(), "4004") {
		t.Errorf("wrong token: Open = %v, want close 4004", err)
	}
	// Without "Bot " the gateway accepts the token, but REST refuses it.
	s, _ = discordgo.New(token)
	s.Client = srv.HTTPClient()
	s.ShouldReconnectOnError = false
	if err := s.Open(); err != nil {
		t.Fatalf("bare token: Open = %v", err)
	}
	_, err := s.User("@me")
	s.Close()
	if st, _ := restCode(t, err); st != 401 {
		t.Errorf("REST with a bare token answered %d", st)
	}

	s, _ = discordgo.New("Bot " + token)
	s.Client = srv.HTTPClient()
	s.Identify.Intents = allIntents
	err = s.Open()
	if err == nil {
		s.Close()
		t.Fatal("a privileged intent was accepted")
	}
	if !strings.Contains(err.Error(), "4014") {
		t.Errorf("Open: %v, want close 4014", err)
	}
}

func TestWaitForEndsWithContext(t *testing.T) {
	t.Parallel()
	srv := fakediscord.New(t, fakediscord.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.WaitFor(ctx, func() bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitFor = %v", err)
	}
	srv.Close()
	if err := srv.WaitFor(context.Background(), func() bool { return false }); !errors.Is(err, fakediscord.ErrClosed) {
		t.Errorf("WaitFor after Close = %v", err)
	}
}

func TestServerClosesAndInvalidations(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	var ready <-chan *discordgo.Ready
	openBot(t, srv, allIntents, func(s *discordgo.Session) { ready = events[*discordgo.Ready](s) })
	recv(t, ready, nil)

	// A close code other than 1000/1001 leaves the session resumable.
	srv.CloseGateway(4000, "Unknown error.", false)
	srv.Await("a resume", func() bool { st := srv.Stats(); return st.Resumes == 1 && st.Connected })

	// INVALID_SESSION (not resumable): discordgo identifies again on the
	// same connection.
	srv.InvalidateSession(false)
	recv(t, ready, nil)
	if st := srv.Stats(); st.Identifies != 2 || st.Connections != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestSelectMenu(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	picked := make(chan []string, 1)
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		s.AddHandler(func(s *discordgo.Session, i *discordgo.InteractionCreate) {
			if i.Type != discordgo.InteractionMessageComponent {
				return
			}
			s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
			picked <- i.MessageComponentData().Values
		})
	})
	m, err := s.ChannelMessageSendComplex(channelID, &discordgo.MessageSend{
		Content: "Pick a model",
		Components: []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.SelectMenu{CustomID: "model", Options: []discordgo.SelectMenuOption{
				{Label: "Small", Value: "small"}, {Label: "Large", Value: "large"},
			}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := srv.SelectMenu(channelID, m.ID, alice.ID, "model", "large")
	if v := recv(t, picked, nil); len(v) != 1 || v[0] != "large" {
		t.Errorf("values = %v", v)
	}
	srv.Await("the response", func() bool { return len(srv.InteractionResponses(id)) == 1 })
	if r := srv.InteractionResponses(id)[0]; r.Type != 6 || r.Status != 204 {
		t.Errorf("response = %+v", r)
	}
}

// A button opens a modal; the user who clicked submits it, and the bot
// gets the values and may update the button's message. A modal Discord
// would refuse (six inputs) is refused, and a submitted modal cannot be
// answered with another.
func TestModal(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	srv.AddUser(alice)
	submitted := make(chan map[string]string, 1)
	refused := make(chan error, 2)
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		s.AddHandler(func(s *discordgo.Session, i *discordgo.InteractionCreate) {
			switch i.Type {
			case discordgo.InteractionMessageComponent:
				input := func(id string) discordgo.MessageComponent {
					return discordgo.ActionsRow{Components: []discordgo.MessageComponent{
						discordgo.TextInput{CustomID: id, Label: "Field " + id, Style: discordgo.TextInputShort, Required: id == "a", MaxLength: 10, Value: "pre-" + id}}}
				}
				var six []discordgo.MessageComponent
				for _, id := range []string{"1", "2", "3", "4", "5", "6"} {
					six = append(six, input(id))
				}
				refused <- s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseModal,
					Data: &discordgo.InteractionResponseData{CustomID: "form", Title: "Too many", Components: six}})
				s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseModal,
					Data: &discordgo.InteractionResponseData{CustomID: "form", Title: "Tell me", Components: []discordgo.MessageComponent{input("a"), input("b")}}})
			case discordgo.InteractionModalSubmit:
				d := i.ModalSubmitData()
				values := map[string]string{"custom_id": d.CustomID}
				for _, row := range d.Components {
					for _, c := range row.(*discordgo.ActionsRow).Components {
						ti := c.(*discordgo.TextInput)
						values[ti.CustomID] = ti.Value
					}
				}
				refused <- s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseModal,
					Data: &discordgo.InteractionResponseData{CustomID: "again", Title: "Again", Components: []discordgo.MessageComponent{}}})
				s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseUpdateMessage,
					Data: &discordgo.InteractionResponseData{Content: "filled in", Components: []discordgo.MessageComponent{}}})
				submitted <- values
			}
		})
	})
	m, err := s.ChannelMessageSendComplex(channelID, &discordgo.MessageSend{
		Content: "Fill in",
		Components: []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.Button{Label: "Open", Style: discordgo.PrimaryButton, CustomID: "open"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	click := srv.ClickButton(channelID, m.ID, alice.ID, "open")
	if st, _ := restCode(t, recv(t, refused, nil)); st != 400 {
		t.Errorf("a modal of six inputs: status %d", st)
	}
	srv.Await("the modal", func() bool { _, ok := srv.Modal(click); return ok })
	modal, _ := srv.Modal(click)
	if modal.Title != "Tell me" || len(modal.Inputs) != 2 || !modal.Inputs[0].Required || modal.Inputs[1].Value != "pre-b" || modal.Inputs[0].MaxLength != 10 {
		t.Fatalf("modal = %+v", modal)
	}
	id := srv.SubmitModal(click, alice.ID, map[string]string{"a": "typed"})
	got := recv(t, submitted, nil)
	if got["custom_id"] != "form" || got["a"] != "typed" || got["b"] != "pre-b" {
		t.Errorf("submitted %v", got)
	}
	if st, _ := restCode(t, recv(t, refused, nil)); st != 400 {
		t.Errorf("a modal answering a modal: status %d", st)
	}
	srv.Await("the update", func() bool { r := srv.InteractionResponses(id); return len(r) == 2 && r[1].Status == 204 })
	in, _ := srv.Interaction(id)
	if in.Type != 5 || in.MessageID != m.ID || in.ModalValues["a"] != "typed" {
		t.Errorf("interaction = %+v", in)
	}
	if after, _ := srv.Message(channelID, m.ID); after.Content != "filled in" || len(after.Buttons()) != 0 {
		t.Errorf("message after the modal = %q", after.Content)
	}
}

// A multi-select takes between min_values and max_values of its own
// options; a menu whose max_values exceeds its options is refused.
func TestSelectMenu_MultipleValues(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{})
	picked := make(chan []string, 1)
	s := openBot(t, srv, allIntents, func(s *discordgo.Session) {
		s.AddHandler(func(s *discordgo.Session, i *discordgo.InteractionCreate) {
			if i.Type == discordgo.InteractionMessageComponent {
				s.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
				picked <- i.MessageComponentData().Values
			}
		})
	})
	zero := 0
	menu := func(maxValues int) []discordgo.MessageComponent {
		return []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.SelectMenu{CustomID: "tags", MinValues: &zero, MaxValues: maxValues, Options: []discordgo.SelectMenuOption{
				{Label: "A", Value: "a"}, {Label: "B", Value: "b"}, {Label: "C", Value: "c"}}}}}}
	}
	if _, err := s.ChannelMessageSendComplex(channelID, &discordgo.MessageSend{Content: "x", Components: menu(4)}); err == nil {
		t.Error("a menu of 3 options taking 4 values was accepted")
	}
	m, err := s.ChannelMessageSendComplex(channelID, &discordgo.MessageSend{Content: "Tags", Components: menu(2)})
	if err != nil {
		t.Fatal(err)
	}
	srv.SelectMenu(channelID, m.ID, alice.ID, "tags", "a", "c")
	if v := recv(t, picked, nil); len(v) != 2 || v[0] != "a" || v[1] != "c" {
		t.Errorf("values = %v", v)
	}
	srv.SelectMenu(channelID, m.ID, alice.ID, "tags")
	if v := recv(t, picked, nil); len(v) != 0 {
		t.Errorf("values = %v", v)
	}
}
