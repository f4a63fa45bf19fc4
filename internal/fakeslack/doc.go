// Package fakeslack is a fake Slack, a real HTTP and WebSocket server on 127.0.0.1 that speaks enough of the Web API, Socket Mode and the HTTP Events API for the unmodified slack-go client and its socketmode package to run against it in tests.
//
// # Connecting
//
// A test creates a Server with New and adds the workspace's users and
// conversations (AddUser, AddChannel, AddDM, AddUserGroup). The bot
// under test uses the fake's Web API with
//
//	api := slack.New(srv.BotToken(),
//		slack.OptionAPIURL(srv.APIURL()),
//		slack.OptionAppLevelToken(srv.AppToken()),
//		slack.OptionHTTPClient(srv.HTTPClient()))
//	client := socketmode.New(api)
//
// (HTTPClient's idle connections close with the server, so that none
// outlives a test checked with goleak), and its apps.connections.open hands out a ws:// URL of the fake, where
// the socketmode client is greeted with hello and then receives
// envelopes. Several connections may be open at once, as on Slack: each
// envelope goes to one of them, in turn; at most Options.MaxConnections
// (10) are served, one more is told to disconnect (too_many_websockets).
// Connections are pinged every Options.PingInterval. Disconnect,
// RefreshConnections and DisableLink send the disconnect message with its
// reason, DropConnections cuts them, SetPings(false) makes them look
// dead.
//
// Alternatively UseHTTP makes the fake POST envelopes to Request URLs the
// test serves, signed with the signing secret (X-Slack-Signature v0,
// X-Slack-Request-Timestamp) as Slack does: events as JSON, interactions
// as a form with payload=, slash commands as a form. VerifyURL sends the
// url_verification challenge. SendSigned posts a request with a wrong
// secret, a stale timestamp or no signature; Replay sends a recorded
// request again byte for byte. In either mode Redeliver sends an
// envelope's payload again in a new envelope (signed anew over HTTP), and
// Resend sends a settled envelope again under its own id, as Slack may
// deliver one thing twice.
//
// # Envelopes
//
// Everything the app is sent is an Envelope: an Events API event, an
// interaction or a slash command, with its attempts. It must be
// acknowledged within Options.AckTimeout (3s): over Socket Mode by
// sending back its envelope_id, over HTTP by answering 200. An event not
// acknowledged in time is sent again after each of Options.RetryDelays
// (immediately, then after 1 and 5 minutes), with retry_attempt and
// retry_reason (X-Slack-Retry-Num, X-Slack-Retry-Reason); an HTTP answer
// with X-Slack-No-Retry: 1 stops the retries. Interactions and commands
// are not sent again: the envelope is marked Failed, as the user would
// see an error. With no Socket Mode connection open, events wait for one,
// while interactions and commands fail at once. An acknowledgement of 20
// KiB or more is dropped unread, as Slack drops it. The
// acknowledgement's payload counts where Slack reads it: a
// view_submission's response_action (errors, update, push, clear, or
// none: the view closes) and a slash command's answer (shown ephemeral,
// or in the channel). Envelopes, EnvelopesOf, AwaitAck and Pending read
// them.
//
// The app hears what users do (PostMessage, EditMessage, DeleteMessage,
// ShareFile, AddReaction, RemoveReaction) as the events it subscribes to
// (Options.Events: app_mention, message.channels, message.groups,
// message.im, message.mpim, reaction_added, reaction_removed,
// file_shared): a message mentioning the bot outside an IM comes as both
// message and app_mention. As on Slack, the app also hears what its own
// bot did (its messages, edits, deletions, reactions, file shares)
// unless Options.NoEcho; and nothing from a conversation its bot is not
// in (Channel.BotAbsent). Users interact with ClickButton, ChooseOption
// (selects, overflow menus, radio buttons, checkboxes, pickers),
// ClickViewButton and ChooseViewOption (in a modal), SubmitView and
// CloseView (view_closed when notify_on_close), and SlashCommand. Each
// interaction and command carries a trigger_id, usable once within
// Options.TriggerLifetime (3s), and most a response_url (five uses in 30
// minutes: replace_original, delete_original, or a new message,
// ephemeral unless in_channel).
//
// # Web API
//
// The fake serves auth.test, apps.connections.open, chat.postMessage,
// chat.update, chat.delete, chat.postEphemeral, chat.getPermalink,
// chat.startStream, chat.appendStream, chat.stopStream, reactions.add,
// reactions.remove, reactions.get, conversations.info,
// conversations.replies, conversations.history, conversations.open,
// users.info, usergroups.list, usergroups.users.list, views.open,
// views.push, views.update, files.getUploadURLExternal (and the upload
// URL it hands out), files.completeUploadExternal, files.info,
// assistant.threads.setStatus, assistant.threads.setTitle and
// assistant.threads.setSuggestedPrompts; files.upload answers
// method_deprecated and any other method unknown_method. Arguments are
// taken from the query, a form or a JSON body, as slack-go sends them;
// the token from "Authorization: Bearer" or the token argument: none is
// not_authed, a wrong one invalid_auth, the app token where the bot token
// belongs (or the reverse) not_allowed_token_type. A JSON body without
// charset=utf-8 is answered with the missing_charset warning. A file's
// url_private, under FilesURL (as Slack's are under
// https://files.slack.com/files-pri/), serves its bytes to the bot token
// and redirects anyone else to a sign-in page, which slack-go's GetFile
// reports; SharedFile.URL makes a file claim to be elsewhere.
//
// The fake answers Slack's errors where a bot could be caught out: 50
// blocks a message (100 a modal), 3,000 characters a section text, 2,000
// a field, 10 fields, 150 a header, 75 a button's text, 2,000 its value,
// 255 an action_id or block_id (unique), 100 options a static select,
// 12,000 a markdown block or markdown_text (invalid_blocks, with Slack's
// messages and JSON pointers in response_metadata); Options.MaxTextLength
// (40,000) a message's text (msg_too_long); a modal's title, submit and
// close 24 characters, its views three deep (push_limit_reached), a
// trigger_id used twice (exchanged_trigger_id) or late
// (expired_trigger_id); only the bot's messages may be updated or deleted
// (cant_update_message, cant_delete_message), an ephemeral message not at
// all (message_not_found); already_reacted, no_reaction, invalid_name;
// not_in_channel, user_not_in_channel, is_archived; a reply to a thread
// that is not there is posted at the top level, as Slack does (the
// message records UnthreadedFrom). A streamed message (chat.startStream)
// takes appends until chat.stopStream, Options.StreamLifetime (5 minutes)
// or the user's stop (StopStreamAsUser), after which appends answer
// message_not_in_streaming_state or stopped_by_user; chat.update of it
// meanwhile answers streaming_state_conflict. assistant.threads.setStatus
// is cleared when the bot replies in the thread, or after two minutes.
//
// # Rate limits and faults
//
// Every method has a token bucket as Slack documents its tier
// (DefaultRateLimits; chat.postMessage about one a second per channel,
// with short bursts; Options.NonMarketplace for the limits of apps
// outside the Marketplace). A call past its limit is answered 429
// ratelimited with Retry-After, which slack-go returns as a
// *slack.RateLimitedError; refused calls count against the limit too.
// Inject429, InjectError (5xx with an HTML
// body), InjectSlackError ({"ok": false, "error": …}), InjectDrop (the
// connection cut) and InjectStall (a late answer) fail the next calls a
// Match selects; SetChaos fails a share of them at random.
//
// # Reading what the bot did
//
// Messages, Thread and Message show messages as they now stand (with
// their Stream), Revisions every state a message went through,
// Reactions and HasReaction the reactions, Ephemerals what each user was
// shown alone, Views and OpenView the modals, Files the uploads,
// ThreadStatus and StatusLog the assistant statuses and titles, Calls and
// CallsTo every request with its time, arguments and answer (for
// assertions on pacing), RateLimited the calls answered 429, and
// SocketStats the Socket Mode counters. WaitFor and Await block until a
// condition on them holds; WaitMessage until a message is there.
//
// All methods of Server are safe for concurrent use. The helpers that act
// as users report misuse (an unknown channel, a button that is not
// there) with tb.Errorf.
package fakeslack
