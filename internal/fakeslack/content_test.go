package fakeslack_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

func TestFileUploadedIntoAThreadAndDownloaded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	b := runBot(t, w.srv, nil)
	ctx := context.Background()
	parent := w.srv.PostMessage(w.general.ID, w.alice.ID, "send me the log")
	log := []byte(strings.Repeat("line\n", 1000))
	sum, err := w.api.UploadFileContext(ctx, slack.UploadFileParameters{
		Reader: bytes.NewReader(log), FileSize: len(log), Filename: "agent.log", Title: "Agent log",
		Channel: w.general.ID, ThreadTimestamp: parent, InitialComment: "here it is",
	})
	if err != nil {
		t.Fatal(err)
	}
	f, ok := w.srv.File(sum.ID)
	if !ok || !bytes.Equal(f.Data, log) || f.Title != "Agent log" || f.Channel != w.general.ID || f.ThreadTS != parent || f.Mimetype == "" {
		t.Fatalf("file = %+v", f)
	}
	thread := w.srv.Thread(w.general.ID, parent)
	if len(thread) != 2 || thread[1].Text != "here it is" || len(thread[1].Files) != 1 || thread[1].Files[0] != sum.ID {
		t.Errorf("thread = %+v", thread)
	}
	// The app hears that its file was shared.
	b.next(t, func(ev socketmode.Event) bool {
		fs, ok := innerOf(ev).(*slackevents.FileSharedEvent)
		return ok && fs.FileID == sum.ID
	})

	ts, fileID := w.srv.ShareFile(w.general.ID, w.alice.ID, fakeslack.SharedFile{
		Name: "notes.md", Data: []byte("# notes"), Comment: w.srv.Bot().Mention() + " read this", ThreadTS: parent,
	})
	ev := b.next(t, func(ev socketmode.Event) bool { _, ok := innerOf(ev).(*slackevents.AppMentionEvent); return ok })
	mention := innerOf(ev).(*slackevents.AppMentionEvent)
	if mention.TimeStamp != ts || mention.ThreadTimeStamp != parent || len(mention.Files) != 1 || mention.Files[0].ID != fileID {
		t.Fatalf("app_mention with a file = %+v", mention)
	}
	var got bytes.Buffer
	if err := w.api.GetFileContext(ctx, mention.Files[0].URLPrivateDownload, &got); err != nil || got.String() != "# notes" {
		t.Errorf("download = %q, %v", got.String(), err)
	}
	if f, _ := w.srv.File(fileID); f.Downloads != 1 {
		t.Errorf("downloads = %d", f.Downloads)
	}
	// Without the bot token Slack sends the sign-in page, which GetFile
	// reports rather than writing it as the file.
	got.Reset()
	err = newAPI(w.srv, "xoxb-someone-else").GetFileContext(ctx, mention.Files[0].URLPrivate, &got)
	if err == nil || !strings.Contains(err.Error(), "sign-in") {
		t.Errorf("download with another token: %v (%q)", err, got.String())
	}
	info, _, _, err := w.api.GetFileInfoContext(ctx, fileID, 0, 0)
	if err != nil || info.Name != "notes.md" || info.URLPrivate == "" {
		t.Errorf("files.info = %+v, %v", info, err)
	}
}

func TestUploadLimits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{MaxFileSize: 1000})
	ctx := context.Background()
	if _, err := w.api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: "big.bin", FileSize: 1001}); slackErr(t, err) != "file_upload_size_restricted" {
		t.Errorf("a file too big: %v", err)
	}
	up, err := w.api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: "a.txt", FileSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: up.FileID}}, Channel: w.general.ID}); slackErr(t, err) != "file_not_found" {
		t.Errorf("complete before the upload: %v", err)
	}
	if n := len(w.srv.Files()); n != 0 {
		t.Errorf("%d files before the bytes came", n)
	}
	if err := w.api.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: up.UploadURL, Content: "abc", Filename: "a.txt"}); err != nil {
		t.Fatal(err)
	}
	if files := w.srv.Files(); len(files) != 1 || files[0].ID != up.FileID || files[0].Channel != "" {
		t.Errorf("files after the upload = %+v", files)
	}
	if _, err := w.api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: up.FileID}}, Channel: "C-none"}); slackErr(t, err) != "channel_not_found" {
		t.Errorf("complete into no channel: %v", err)
	}
	if _, err := w.api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: up.FileID}}, Channel: w.general.ID}); err != nil {
		t.Errorf("complete: %v", err)
	}
	if f, _ := w.srv.File(up.FileID); string(f.Data) != "abc" || f.Channel != w.general.ID {
		t.Errorf("file = %+v", f)
	}
}

func TestStreamedMessage(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	parent := w.srv.PostMessage(w.general.ID, w.alice.ID, "explain")
	if _, _, err := w.api.StartStream(w.general.ID, slack.MsgOptionTS(parent)); slackErr(t, err) != "missing_recipient_team_id" {
		t.Errorf("a stream in a channel without its recipient: %v", err)
	}
	recipient := []slack.MsgOption{slack.MsgOptionTS(parent), slack.MsgOptionRecipientTeamID(w.srv.Team().ID), slack.MsgOptionRecipientUserID(w.alice.ID)}
	_, ts, err := w.api.StartStream(w.general.ID, append(recipient, slack.MsgOptionMarkdownText("First"))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.api.AppendStream(w.general.ID, ts, slack.MsgOptionMarkdownText(", second")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.api.AppendStream(w.general.ID, ts, slack.MsgOptionChunks(slack.NewMarkdownTextChunk("x"))); slackErr(t, err) != "streaming_mode_mismatch" {
		t.Errorf("chunks after markdown_text: %v", err)
	}
	if _, _, _, err := w.api.UpdateMessage(w.general.ID, ts, slack.MsgOptionText("edit", false)); slackErr(t, err) != "streaming_state_conflict" {
		t.Errorf("chat.update while streaming: %v", err)
	}
	if _, _, err := w.api.StopStream(w.general.ID, ts, slack.MsgOptionMarkdownText(", done."),
		slack.MsgOptionBlocks(slack.NewActionBlock("fb", slack.NewButtonBlockElement("good", "1", text("👍"))))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.api.AppendStream(w.general.ID, ts, slack.MsgOptionMarkdownText("late")); slackErr(t, err) != "message_not_in_streaming_state" {
		t.Errorf("append after stop: %v", err)
	}
	m, _ := w.srv.Message(w.general.ID, ts)
	if m.Text != "First, second, done." || m.Stream == nil || m.Stream.State != "stopped" || len(m.Stream.Appends) != 3 ||
		m.ThreadTS != parent || len(m.Blocks) != 1 || m.Stream.RecipientUser != w.alice.ID {
		t.Errorf("streamed message = %+v (stream %+v)", m, m.Stream)
	}

	_, ts2, err := w.api.StartStream(w.general.ID, recipient...)
	if err != nil {
		t.Fatal(err)
	}
	w.srv.StopStreamAsUser(w.general.ID, ts2)
	if _, _, err := w.api.AppendStream(w.general.ID, ts2, slack.MsgOptionMarkdownText("more")); slackErr(t, err) != "stopped_by_user" {
		t.Errorf("append after the user's stop: %v", err)
	}
	if _, _, err := w.api.AppendStream(w.general.ID, parent, slack.MsgOptionMarkdownText("x")); slackErr(t, err) != "message_not_owned_by_app" {
		t.Errorf("append to a user's message: %v", err)
	}
	// In an IM no recipient is needed.
	if _, _, err := w.api.StartStream(w.dm.ID); err != nil {
		t.Errorf("a stream in an IM: %v", err)
	}
}

func TestStreamExpires(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{StreamLifetime: 200 * time.Millisecond})
	_, ts, err := w.api.StartStream(w.dm.ID, slack.MsgOptionMarkdownText("a"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, _, err := w.api.AppendStream(w.dm.ID, ts, slack.MsgOptionMarkdownText("b")); slackErr(t, err) != "message_not_in_streaming_state" {
		t.Errorf("append after the lifetime: %v", err)
	}
	if m, _ := w.srv.Message(w.dm.ID, ts); m.Stream.State != "expired" {
		t.Errorf("stream = %+v", m.Stream)
	}
}

func TestAssistantStatusClearedByTheReply(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	parent := w.srv.PostMessage(w.dm.ID, w.alice.ID, "help")
	if err := w.api.SetAssistantThreadsStatus(slack.AssistantThreadsSetStatusParameters{ChannelID: w.dm.ID, ThreadTS: parent, Status: "is thinking…"}); err != nil {
		t.Fatal(err)
	}
	if err := w.api.SetAssistantThreadsTitle(slack.AssistantThreadsSetTitleParameters{ChannelID: w.dm.ID, ThreadTS: parent, Title: "Help"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.srv.ThreadStatus(w.dm.ID, parent); st.Status != "is thinking…" || st.Title != "Help" {
		t.Errorf("status = %+v", st)
	}
	if err := w.api.SetAssistantThreadsStatus(slack.AssistantThreadsSetStatusParameters{ChannelID: w.dm.ID, ThreadTS: "1.000001", Status: "x"}); slackErr(t, err) != "invalid_thread_ts" {
		t.Errorf("status of no thread: %v", err)
	}
	if _, _, err := w.api.PostMessage(w.dm.ID, slack.MsgOptionText("answer", false), slack.MsgOptionTS(parent)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m, err := w.srv.WaitMessage(ctx, w.dm.ID, func(m fakeslack.Message) bool { return m.FromBot() }); err != nil || m.ThreadTS != parent {
		t.Fatalf("the reply = %+v, %v", m, err)
	}
	st, _ := w.srv.ThreadStatus(w.dm.ID, parent)
	if st.Status != "" || st.Cleared != "reply" {
		t.Errorf("status after the reply = %+v", st)
	}
	if log := w.srv.StatusLog(); len(log) != 3 {
		t.Errorf("status log = %+v", log)
	}
}

func TestHistoryAndRepliesPage(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{NoRateLimits: true})
	parent := w.srv.PostMessage(w.general.ID, w.alice.ID, "top")
	for i := range 5 {
		w.srv.PostMessage(w.general.ID, w.bob.ID, "reply "+strconv.Itoa(i), fakeslack.InThread(parent))
	}
	for i := range 3 {
		w.srv.PostMessage(w.general.ID, w.alice.ID, "later "+strconv.Itoa(i))
	}
	var all []slack.Message
	cursor := ""
	for pages := 0; ; pages++ {
		msgs, more, next, err := w.api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: w.general.ID, Timestamp: parent, Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, msgs...)
		if !more {
			break
		}
		if pages > 5 {
			t.Fatal("replies never end")
		}
		cursor = next
	}
	if len(all) != 6 || all[0].Text != "top" || all[5].Text != "reply 4" {
		t.Errorf("replies = %d, first %q", len(all), all[0].Text)
	}
	hist, err := w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.general.ID, Limit: 3})
	if err != nil || len(hist.Messages) != 3 || !hist.HasMore || hist.Messages[0].Text != "later 2" {
		t.Fatalf("history = %+v, %v", hist, err)
	}
	hist, err = w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.general.ID, Cursor: hist.ResponseMetaData.NextCursor})
	if err != nil || len(hist.Messages) != 1 || hist.Messages[0].Text != "top" || hist.Messages[0].ReplyCount != 5 || hist.HasMore {
		t.Errorf("history page 2 = %+v, %v", hist, err)
	}
	if _, _, _, err := w.api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: w.general.ID, Timestamp: "1.000001"}); slackErr(t, err) != "thread_not_found" {
		t.Errorf("replies of no thread: %v", err)
	}
	link, err := w.api.GetPermalink(&slack.PermalinkParameters{Channel: w.general.ID, Ts: parent})
	if err != nil || !strings.Contains(link, "/archives/"+w.general.ID+"/p"+strings.ReplaceAll(parent, ".", "")) {
		t.Errorf("permalink = %q, %v", link, err)
	}
}

func TestNonMarketplaceHistoryLimits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{NonMarketplace: true})
	for i := range 20 {
		w.srv.PostMessage(w.general.ID, w.alice.ID, strconv.Itoa(i))
	}
	hist, err := w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.general.ID, Limit: 100})
	if err != nil || len(hist.Messages) != 15 || !hist.HasMore {
		t.Fatalf("history = %d messages, %v", len(hist.Messages), err)
	}
	_, err = w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.general.ID, Cursor: hist.ResponseMetaData.NextCursor})
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter < 50*time.Second {
		t.Errorf("a second call within the minute: %v", err)
	}
}

func TestUsersGroupsAndConversations(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	g := w.srv.AddUserGroup(fakeslack.UserGroup{Handle: "oncall", Members: []string{w.alice.ID}})
	w.srv.AddUserGroup(fakeslack.UserGroup{Handle: "old", Disabled: true})
	u, err := w.api.GetUserInfo(w.alice.ID)
	if err != nil || u.Name != "alice" || u.Profile.Email != "alice@example.com" || u.IsBot {
		t.Errorf("users.info = %+v, %v", u, err)
	}
	if _, err := w.api.GetUserInfo("U-none"); slackErr(t, err) != "user_not_found" {
		t.Errorf("an unknown user: %v", err)
	}
	members, err := w.api.GetUserGroupMembers(g.ID)
	if err != nil || len(members) != 1 || members[0] != w.alice.ID {
		t.Errorf("usergroups.users.list = %v, %v", members, err)
	}
	w.srv.SetGroupMembers(g.ID, w.alice.ID, w.bob.ID)
	groups, err := w.api.GetUserGroups(slack.GetUserGroupsOptionIncludeUsers(true))
	if err != nil || len(groups) != 1 || groups[0].Handle != "oncall" || len(groups[0].Users) != 2 {
		t.Errorf("usergroups.list = %+v, %v", groups, err)
	}
	if _, err := w.api.GetUserGroupMembers("S-none"); slackErr(t, err) != "no_such_subteam" {
		t.Errorf("an unknown group: %v", err)
	}
	info, err := w.api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: w.general.ID, IncludeNumMembers: true})
	if err != nil || info.Name != "general" || !info.IsChannel || !info.IsMember || info.NumMembers != 3 {
		t.Errorf("conversations.info = %+v, %v", info, err)
	}
	dm, _, _, err := w.api.OpenConversation(&slack.OpenConversationParameters{Users: []string{w.alice.ID}})
	if err != nil || dm.ID != w.dm.ID {
		t.Errorf("conversations.open = %+v, %v", dm, err)
	}
	// A user id as the channel posts into the IM.
	if ch, _, err := w.api.PostMessage(w.bob.ID, slack.MsgOptionText("psst", false)); err != nil || !strings.HasPrefix(ch, "D") {
		t.Errorf("post to a user = %s, %v", ch, err)
	}
}

func TestUserEditsAndDeletionsReachTheApp(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	b := runBot(t, w.srv, nil)
	ts := w.srv.PostMessage(w.general.ID, w.alice.ID, "typo")
	w.srv.EditMessage(w.general.ID, ts, w.srv.Bot().Mention()+" fixed")
	w.srv.DeleteMessage(w.general.ID, ts)
	var kinds []string
	for range 4 {
		ev := b.next(t, nil)
		switch e := innerOf(ev).(type) {
		case *slackevents.MessageEvent:
			kinds = append(kinds, "message/"+e.SubType)
		case *slackevents.AppMentionEvent:
			kinds = append(kinds, "app_mention")
			if e.Edited == nil {
				t.Errorf("app_mention on an edit has no edited: %+v", e)
			}
		}
	}
	want := "message/ message/message_changed app_mention message/message_deleted"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("events = %s, want %s", got, want)
	}
}

func TestPrivateChannelsAndAbsentBot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	hidden := w.srv.AddChannel(fakeslack.Channel{Name: "hidden", Kind: fakeslack.Private, BotAbsent: true, Members: []string{w.alice.ID}})
	runBot(t, w.srv, nil)
	w.srv.PostMessage(hidden.ID, w.alice.ID, w.srv.Bot().Mention()+" can you see this?")
	if _, _, err := w.api.PostMessage(hidden.ID, slack.MsgOptionText("hi", false)); slackErr(t, err) != "channel_not_found" {
		t.Errorf("post in a private channel without the bot: %v", err)
	}
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "marker")
	w.srv.Await("the marker", func() bool { return len(w.srv.EnvelopesOf("message")) == 1 })
	if n := len(w.srv.EnvelopesOf("app_mention")); n != 0 {
		t.Errorf("%d mentions heard from a channel the bot is not in", n)
	}
	status, body := rawCall(t, w.srv, "conversations.info", map[string][]string{"channel": {hidden.ID}},
		http.Header{"Authorization": {"Bearer " + w.srv.BotToken()}})
	if status != 200 || body["error"] != "channel_not_found" {
		t.Errorf("conversations.info of a hidden channel: %d %v", status, body)
	}
}
