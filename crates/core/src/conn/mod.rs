//! One replicated connection: the per-connection state machine of
//! COSCANet-FT §III-C (inbound multicast), §III-D (outbound aggregation,
//! timestamps, windows, failure evidence) and §III-E (establishment).
//!
//! Sequence spaces. The client's stream has one sequence space, shared by
//! the client and every replica (the client's SYN reaches every replica
//! unchanged). The server's stream has one space per replica (each picks its
//! own ISN) and a client-visible space that starts at the router's ISN; a
//! leg's `off` maps replica space onto client space. Unless a name says
//! otherwise, every `SeqNum` kept here is in client-visible space.

mod challenge;
mod check;
mod close;
mod detect;
mod handshake;
mod inbound;
mod join;
mod leg;
mod lifecycle;
mod log;
mod outbound;
mod recovery;
mod timer;
mod translate;
mod voting;

use challenge::may_challenge;
pub use challenge::ChallengeBudget;
use check::Check;
pub(crate) use check::CheckMode;
pub(crate) use join::Quiet;
use leg::{Leg, LegState};
pub(crate) use lifecycle::SynOnKey;
use recovery::Adoption;
pub(crate) use recovery::PROMPT_AT;
pub use translate::csum_mode;
use translate::translate_tsecr;
use voting::VoteState;

use crate::config::{Timeouts, Voting};
use crate::event::{EvictReason, Outbox};
use crate::ids::{ReplicaId, ServiceId};
use crate::key::ConnKey;
use crate::metrics::Counters;
use crate::packet::{Headers, Packet};
use crate::status::{ConnSample, LegSample};
use crate::time::Instant;
use crate::wrap::mod32;
use ftnet_wire::tcp::CsumMode;
use ftnet_wire::SeqNum;
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// What the router learnt of a TCP segment when it classified it. Only
/// built from a packet that passed `new_checked` on both headers.
#[derive(Debug, Clone, Copy)]
pub struct Seg {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: u8,
    pub window: u16,
    pub payload_len: u32,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub ts: Option<(u32, u32)>,
    pub mode: CsumMode,
    /// Where its headers lie (found with `new_checked` once): every copy
    /// is read and rewritten through these offsets.
    pub(crate) at: Headers,
}

impl Seg {
    pub(crate) fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// Everything a connection may touch outside itself while it handles one
/// input.
pub struct Ctx<'a> {
    pub now: Instant,
    pub tx: &'a mut VecDeque<Packet>,
    pub counters: &'a mut Counters,
    /// Events for the operator and messages for the agents.
    pub out: &'a mut Outbox,
    pub timeouts: &'a Timeouts,
    /// (service, replica) pairs that this input proved dead for the whole
    /// service; the router marks them down after the call.
    pub down: &'a mut Vec<(ServiceId, ReplicaId, EvictReason)>,
    /// (service, replica) pairs taken out of a connection that could still
    /// get input: where that replica's server follows the service's input
    /// order it misses input from now on, and the router takes it out of
    /// the service (`Router::apply_down`).
    pub missed: &'a mut Vec<(ServiceId, ReplicaId)>,
    /// Emit `AgentMsg::Input` for the sequencer.
    pub sequencer: bool,
    /// The router-wide challenge-ACK budget (RFC 5961 §7).
    pub challenges: &'a mut ChallengeBudget,
    /// Client bytes every input log together may hold
    /// (`Limits::log_total`; `Counters::log_bytes` is what they hold).
    pub log_total: usize,
    /// The router is on probation after a pause (`Router::note_time`): it
    /// may have been superseded, and a reset it sent could end a
    /// connection another router serves. An evicted leg's side is not
    /// reset then; should the replica speak on it again, it is
    /// (`Conn::evicted_challenged`).
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for every live replica's SYN-ACK.
    Handshake,
    /// Every replica answered; the SYN-ACK waits until the connection's
    /// record is stored at the agents (`Timeouts::record_commit`), so that
    /// no client holds a SYN-ACK of a connection a new router cannot find.
    /// It goes out `by` then even unconfirmed.
    Committing {
        by: Instant,
        /// When the wait began (for `Counters::commit_wait`).
        since: Instant,
    },
    /// The client got our SYN-ACK; waiting for its ACK.
    SynAckSent,
    Established,
    /// Both directions closed and acknowledged `at`; kept for `time_wait`.
    Closed {
        at: Instant,
    },
    /// Gone: the router removes it after this input.
    Dead,
}

impl Phase {
    /// Its name, for the status and the logs.
    fn name(&self) -> &'static str {
        match self {
            Phase::Handshake => "Handshake",
            Phase::Committing { .. } => "Committing",
            Phase::SynAckSent => "SynAckSent",
            Phase::Established => "Established",
            Phase::Closed { .. } => "Closed",
            Phase::Dead => "Dead",
        }
    }
}

/// A replicated connection.
#[derive(Debug)]
pub struct Conn {
    key: ConnKey,
    svc: ServiceId,
    phase: Phase,
    created: Instant,
    last_activity: Instant,
    client_isn: SeqNum,
    router_isn: SeqNum,
    legs: Vec<Leg>,
    /// Client stream: end of what the client sent (its FIN counted).
    client_hi: SeqNum,
    /// Client stream: end of the data announced to the sequencer.
    input_hi: SeqNum,
    /// Adopted after a takeover: where the last chunks of the client's
    /// stream ended, as the agents' order reports say (newest first, at
    /// most [`PROMPT_AT`]). The client's SND.UNA lies at one of
    /// them or at what the replicas acknowledged (`Conn::prompt_client`).
    input_ends: Vec<SeqNum>,
    /// Safe delivery (`Delivery::Safe`): client bytes are numbered only
    /// once every live replica acknowledged them.
    safe: bool,
    /// The sequencer's Accept of this connection went out (by this router,
    /// or by the one before a takeover, as the agents' records say).
    order_accepted: bool,
    /// The replicas this connection's input events go to: those its Accept
    /// went to (see `input`). Not only the live legs: a replica stays here
    /// after it left the connection.
    order_to: Vec<Ipv4Addr>,
    /// Adopted: the replicas of the agents' record that have no leg in the
    /// connection as rebuilt (their agents had no record of it: their
    /// servers lost the socket while no router could tell), found when the
    /// first chunk after the rebuild is numbered. The router takes them
    /// out of the service ([`Conn::take_missed_no_leg`]): their servers
    /// miss this connection's input from then on. Checked once.
    missed_no_leg: Option<Vec<Ipv4Addr>>,
    client_fin: Option<SeqNum>,
    /// Server stream: what the client had acknowledged when it closed (the
    /// ACK on the first FIN of it the router saw). A replica that has not
    /// sent that far gets the client's FIN only once it has
    /// ([`Conn::fin_held`]).
    fin_hold: Option<SeqNum>,
    client_win: u16,
    client_tsval: u32,
    client_ts: bool,
    client_ws: bool,
    /// Server stream: end of what the client was sent.
    sent_hi: SeqNum,
    /// Server stream: highest ACK from the client.
    client_ack: SeqNum,
    /// When `client_ack` last moved (a replica whose output waits for it
    /// is not convicted by another's: `Conn::fail_deadline`).
    client_ack_at: Instant,
    fin_sent: bool,
    /// What the client was last told.
    adv_ack: SeqNum,
    /// End of the client bytes it sent again (a retransmission: they start
    /// below `client_hi`) that it was not yet told are acknowledged. While
    /// the client's ACK lies below it, segments to the client echo no
    /// timestamp (`Conn::echo`): a replica's echo is older than the
    /// retransmission, and Linux, given an ACK that moves into bytes it
    /// sent again with such an echo, undoes its timeout as spurious while
    /// the retransmission is still out; its next timeout then counts that
    /// retransmission twice (`retrans_out` never returns to 0), its
    /// retransmission clock (`retrans_stamp`) never stops, and the
    /// connection's next two timeouts in a row, at a router takeover even
    /// hours later, end it with ETIMEDOUT (tcp_retries2 is counted from
    /// that stale start).
    client_rtx_hi: Option<SeqNum>,
    /// Adopted after a takeover, and the client has sent neither bytes nor
    /// a segment showing that the group has all it sent: bytes it sent
    /// again are unknown here, so segments to it echo no timestamp (as
    /// for `client_rtx_hi`).
    echo_unknown: bool,
    /// Rebuilt after a takeover, and the client not yet prompted to
    /// retransmit (`Conn::prompt_client`, sent after the rebuild's ACK).
    prompt_due: bool,
    /// Rebuilt after a takeover, and the replicas not yet prompted to
    /// resend what the client lacks (`Conn::prompt_replicas`, at the
    /// client's first segment after the rebuild).
    prompt_replicas_due: bool,
    /// The client spoke only while the connection was rebuilt (a resend
    /// that reached this router before the agents' records, or during the
    /// rebuild): its next segment is taken as its first word after the
    /// rebuild (`Conn::dup_acks_for_lost_tail`), and the rebuild's probe
    /// asks it for one (`Conn::prompt_client_probe`).
    first_word_due: bool,
    adv_edge: SeqNum,
    /// Adopted after a takeover: TSvals below this one were another
    /// router's (the client echoes the last one it took in order until a
    /// segment of this router's fills what it lacks). Such an echo goes to
    /// the replicas as none (0): mapped to a replica's clock it dates the
    /// client's ACK before the retransmissions the outage caused, and a
    /// Linux replica without SACK takes its retransmission timeout for
    /// spurious (RFC 3522, `tcp_try_undo_loss`), stays in loss recovery
    /// with nothing marked lost, and resends the next segment the outage
    /// ate only at its next timeout, which that stale echo's round-trip
    /// sample stretched to 500 ms or more. `None` once the client echoes
    /// this router's clock.
    ts_own_from: Option<u32>,
    /// Negotiated for the group.
    ts_on: bool,
    ws_out: u8,
    ts_base: u32,
    /// Earliest timer this connection has in the router's heap.
    timer_at: Option<Instant>,
    /// Counted in the router's half-open total.
    counted_half_open: bool,
    /// Queued in the router's closed list.
    counted_closed: bool,
    /// `AgentMsg::Established` was emitted (so `Forgotten` follows).
    announced: bool,
    /// Its SYN-ACK waits for the record (`Phase::Committing`): an agent
    /// stored it, though not every one yet ([`Conn::commit_heard`]).
    commit_heard: bool,
    /// Its SYN-ACK waits for the record: every agent it went to is gone
    /// and none stored it ([`Conn::commit_orphaned`]).
    commit_orphan: bool,
    /// The client's SYN as the replicas get it, kept during the handshake
    /// to probe a replica whose copy may have been lost.
    syn_copy: Option<(Packet, Headers)>,
    /// When a client SYN last counted as a retry.
    syn_at: Instant,
    /// The MSS the client announced (what one segment to it may carry).
    client_mss: u16,
    /// The MSS announced to the client in our SYN-ACK.
    mss_out: u16,
    /// Output voting state, for services that vote.
    vote: Option<Box<VoteState>>,
    /// Later copies compared after the fact, for services that do not vote
    /// (`check.rs`).
    check: Option<Box<Check>>,
    /// Adopted from the agents' records by a router that took over
    /// (position probes were sent): rebuilding or rebuilt.
    adoption: Option<Adoption>,
    /// A segment from the client was seen (always, but for an adopted
    /// connection until the client speaks): `client_ack`, `sent_hi` and
    /// `client_tsval` are the client's.
    client_seen: bool,
    /// An adopted connection: the client's first segment came before the
    /// connection was whole, and the sequence number it began at (a
    /// retransmission after a timeout begins at its SND.UNA). What it
    /// resent then reached no replica: it waits for its next, backed-off
    /// timeout, and is prompted like a client that has not spoken
    /// (`Conn::prompt_client`).
    client_resent_early: Option<SeqNum>,
    /// An adopted connection not whole yet: client segments with data that
    /// reached only the legs whose position was known, and the legs they
    /// went to. A leg that tells its position later gets them then
    /// ([`Conn::replay_early`]): a client's retransmission that reached the
    /// new router during the rebuild is not lost, and the client does not
    /// wait out another retransmission timeout. Bounded
    /// ([`recovery::EARLY_MAX`]); dropped once the connection is whole.
    early: Vec<(Packet, Seg, Vec<usize>)>,
    early_bytes: usize,
    /// `primary`, after a rebuild: the leg the client follows while it
    /// serves ([`Conn::leader`]), the one that owed the client least when
    /// the connection became whole (`Conn::choose_lead`).
    lead: Option<usize>,
    /// When a replica's probe was last passed on to the client.
    probe_passed_at: Option<Instant>,
    /// The client's segments that arrived beyond the group's ACK (the
    /// first field) and have not had their duplicate ACK passed on yet
    /// (`Conn::dup_speaker`): one per such segment reaches the client,
    /// as from one TCP receiver. A replica's answer to the router's own
    /// probe is no such ACK.
    dup_credit: (SeqNum, u16),
    /// When the client last sent bytes or its FIN, and how many duplicate
    /// ACKs went to it since without a segment of its own to answer
    /// (`Conn::spend_dup`).
    dup_idle: (Instant, u8),
    /// When the last challenge ACK went to the client (RFC 5961 §7).
    challenge_at: Option<Instant>,
    /// When every replica was last asked where its output ends, for a
    /// join ([`Conn::join_rest_probe`]).
    rest_probe_at: Option<Instant>,
    /// Why the joiner's leg was refused (its options), for the join's log.
    join_refusal: Option<String>,
    /// A held leg (`Leg::held`) taken out of this connection, and why:
    /// its joiner missed input here, so its join fails.
    held_lost: Option<(crate::ids::ReplicaId, crate::event::EvictReason)>,
    /// Segments held during a join's pause are being released
    /// ([`Conn::set_releasing`]).
    releasing: bool,
    /// The window scale the client announced in its SYN (`None`: none, or
    /// not known, for a connection adopted after a takeover). A replica
    /// that joins the open connection gets it in its SYN.
    client_wscale: Option<u8>,
    /// The service's input is paused (a replica joins): the client is told
    /// a zero window.
    paused: bool,
    /// When the router last ran again after it had not run for a while
    /// (`Conn::router_resumed`): no leg's silence counts from before.
    resumed_at: Instant,
    /// The input log (`Ack::Log`, `log.rs`); `None`: the client is
    /// acknowledged for what every replica has.
    log: Option<Box<log::InLog>>,
    /// The client reset the connection while a replica lacked logged
    /// bytes: each gets them, then the abort (`Conn::log_reset`); or,
    /// without those bytes in a log, while a replica was behind another
    /// (`reset_wait`).
    resetting: bool,
    /// The client reset the connection while an open replica had
    /// acknowledged less than another (this far): each is reset once it
    /// acknowledged this much (an ACK that was on its way, or delayed),
    /// and one that has not by the failure-detection time after the
    /// reset (since then) lost those bytes and leaves the service
    /// (`Conn::wait_reset`).
    reset_wait: Option<log::ResetWait>,
    /// Adopted, of a service that acknowledges from the log: once rebuilt,
    /// a replica behind the others leaves (`Conn::evict_log_lost`), of the
    /// whole service if `Some(true)` (a stateful one).
    log_lost: Option<bool>,
    /// The last segment to the client offered it a zero window.
    told_zero: bool,
    /// When the client was last sent payload.
    last_payload_out: Option<Instant>,
    /// A replica left while the client was getting payload: the last
    /// payload segment before (`Counters::stall_after_eviction`).
    stall_from: Option<Instant>,
}

/// An eviction opens a stall only on a connection that sent the client
/// payload this recently; a stall longer than `STALL_COUNTED_MAX` is taken
/// for a connection that went idle and is not counted.
const STALL_ACTIVE: core::time::Duration = core::time::Duration::from_secs(1);
const STALL_COUNTED_MAX: core::time::Duration = core::time::Duration::from_secs(60);

/// Largest distance two related sequence numbers may have; beyond it a
/// segment is out of window (RFC 9293 windows are at most 2^30).
const MAX_WIN: i32 = 1 << 30;

impl Conn {
    pub(crate) fn new(
        key: ConnKey,
        svc: ServiceId,
        now: Instant,
        syn: &Seg,
        router_isn: SeqNum,
        ts_base: u32,
        voting: Voting,
    ) -> Conn {
        Conn {
            key,
            svc,
            phase: Phase::Handshake,
            created: now,
            last_activity: now,
            client_isn: syn.seq,
            router_isn,
            legs: Vec::new(),
            client_hi: syn.seq.add(1),
            input_hi: syn.seq.add(1),
            input_ends: Vec::new(),
            safe: false,
            order_accepted: false,
            order_to: Vec::new(),
            missed_no_leg: None,
            client_fin: None,
            fin_hold: None,
            client_win: syn.window,
            client_tsval: syn.ts.map(|t| t.0).unwrap_or(0),
            client_ts: syn.ts.is_some(),
            client_ws: syn.wscale.is_some(),
            sent_hi: router_isn,
            client_ack: router_isn,
            client_ack_at: Instant::ZERO,
            fin_sent: false,
            adv_ack: router_isn,
            client_rtx_hi: None,
            echo_unknown: false,
            prompt_due: false,
            prompt_replicas_due: false,
            first_word_due: false,
            adv_edge: router_isn,
            ts_own_from: None,
            ts_on: false,
            ws_out: 0,
            ts_base,
            timer_at: None,
            counted_half_open: true,
            counted_closed: false,
            announced: false,
            commit_heard: false,
            commit_orphan: false,
            syn_copy: None,
            syn_at: now,
            client_mss: syn.mss.unwrap_or(536).max(64),
            mss_out: 536,
            adoption: None,
            client_seen: true,
            client_resent_early: None,
            early: Vec::new(),
            early_bytes: 0,
            lead: None,
            probe_passed_at: None,
            dup_credit: (SeqNum(0), 0),
            dup_idle: (now, 0),
            challenge_at: None,
            client_wscale: syn.wscale,
            rest_probe_at: None,
            releasing: false,
            join_refusal: None,
            held_lost: None,
            paused: false,
            resumed_at: Instant::ZERO,
            log: None,
            log_lost: None,
            told_zero: false,
            last_payload_out: None,
            stall_from: None,
            resetting: false,
            reset_wait: None,
            check: None,
            vote: match voting {
                Voting::Fastest | Voting::Primary => None,
                Voting::Majority { tie } => Some(Box::new(VoteState {
                    tie,
                    base: router_isn.add(1),
                    agreed: VecDeque::new(),
                    pending: Vec::new(),
                    seen: Vec::new(),
                    stash: Vec::new(),
                    fin: false,
                })),
            },
        }
    }

    /// Compare the replicas' later copies after the fact (`None`: not; a
    /// connection that votes compares before it sends).
    /// The service's delivery (see [`crate::Delivery`]).
    pub(crate) fn set_delivery(&mut self, d: crate::config::Delivery) {
        self.safe = d == crate::config::Delivery::Safe;
    }

    pub(crate) fn set_check(&mut self, mode: Option<CheckMode>) {
        self.check = match mode {
            Some(m) if self.vote.is_none() => Some(Box::new(Check::new(m, self.router_isn.add(1)))),
            _ => None,
        };
    }

    pub(crate) fn live_legs(&self) -> usize {
        self.legs.iter().filter(|l| l.live()).count()
    }

    pub(crate) fn half_open(&self) -> bool {
        matches!(
            self.phase,
            Phase::Handshake | Phase::Committing { .. } | Phase::SynAckSent
        )
    }

    /// Router timestamp clock (RFC 7323 §5.4: 1 ms ticks), offset per
    /// connection so that it reveals nothing about the router's uptime.
    fn router_ts(&self, now: Instant) -> u32 {
        self.ts_base.wrapping_add(mod32(now.as_millis()))
    }

    /// Group ACK towards the client: the minimum over live replicas that
    /// answered (COSCANet-FT §III-C: the client is acknowledged only for
    /// what every replica acknowledged).
    /// With an input log (`Ack::Log`), also what the log and enough
    /// replicas hold (`log.rs`).
    fn group_ack(&self) -> Option<SeqNum> {
        self.all_ack().map(|a| self.log_ack(a))
    }

    /// The ACK a segment to the client carries: the group's, never below
    /// what the client was already told. An eviction can lower the group
    /// ACK (with an input log, the replica that made up the count left;
    /// the log still holds the bytes), and a receiver may drop a segment
    /// whose ACK lies below its SND.UNA, data and all (smoltcp does).
    fn client_ack_field(&self) -> Option<SeqNum> {
        let a = self.group_ack()?;
        let told = self.adv_ack;
        Some(
            if told.is_after(a) && !told.is_after(self.client_hi) && told.diff(a) < (1 << 30) {
                told
            } else {
                a
            },
        )
    }

    /// The TSecr of a segment to the client carrying `ack` that would echo
    /// `e`: none (0) while that ACK may move into bytes the client sent
    /// again (`client_rtx_hi`, `echo_unknown`).
    fn echo(&self, e: u32, ack: SeqNum) -> u32 {
        if self.echo_unknown || self.client_rtx_hi.is_some_and(|hi| ack.is_before(hi)) {
            0
        } else {
            e
        }
    }

    /// Group window right edge: the minimum (§III-D); with an input log,
    /// what enough replicas take within the log's bound.
    fn group_edge(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open())
            .map(|l| l.edge)
            .reduce(|a, b| a.min(b))
            .map(|e| self.log_edge(e))
    }

    /// The client was last told a zero window and the window is open now:
    /// it must be told, even where the edge does not pass the furthest one
    /// it was ever offered (`adv_edge`). A replica's window can move back
    /// (an older ACK reordered on the way, a replica that shrank it), and
    /// a client waiting on a zero window would otherwise wait for a probe
    /// of its own, which not every stack sends. (Not on a voted
    /// connection, whose window follows the votes.)
    fn reopens(&self, ack: SeqNum, edge: SeqNum) -> bool {
        self.told_zero && self.vote.is_none() && self.window_field(ack, edge) != 0
    }

    /// The window field for the client given the group edge and ack.
    fn window_field(&self, ack: SeqNum, edge: SeqNum) -> u16 {
        let field = translate::window_field(ack, edge, self.ws_out);
        if self.paused {
            // FT-TCP §3.2: a closed window keeps the client waiting, without
            // sending new bytes into the pause, while a replica joins. Its
            // right edge stays at the client's highest byte sent, not at
            // the ACK: a client does not retransmit beyond its window, and
            // bytes it sent that were lost on their way (which pass the
            // pause) would otherwise never come, nor the service to rest.
            let sent = u32::try_from(self.client_hi.diff(ack)).unwrap_or(0);
            let up = sent.div_ceil(1u32 << self.ws_out.min(14));
            return field.min(u16::try_from(up).unwrap_or(u16::MAX));
        }
        field
    }

    /// The smallest right window edge over the live replicas whose
    /// position is known (client stream).
    fn min_edge(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open() && l.learned)
            .map(|l| l.edge)
            .reduce(|a, b| a.min(b))
    }

    /// The largest right window edge over the live replicas whose
    /// position is known (client stream).
    fn max_edge(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open() && l.learned)
            .map(|l| l.edge)
            .reduce(|a, b| a.max(b))
    }

    /// Where this connection stands, for the status.
    pub(crate) fn sample(&self) -> ConnSample {
        let cin = |x: SeqNum| x.diff(self.client_isn.add(1)) as u32;
        let out = |x: SeqNum| x.diff(self.router_isn.add(1)) as u32;
        ConnSample {
            conn: self.key.to_string(),
            phase: self.phase.name().to_string(),
            recovering: self.recovering(),
            adopted: self.is_adopted(),
            client_sent: cin(self.client_hi),
            client_was_sent: out(self.sent_hi),
            client_acked: out(self.client_ack),
            client_window: self.client_win,
            legs: self
                .legs
                .iter()
                .map(|l| {
                    // A leg that never answered the SYN still has the
                    // ISNs as its positions.
                    let known = l.learned && l.ack != self.client_isn;
                    let closed = matches!(self.phase, Phase::Closed { .. } | Phase::Dead);
                    LegSample {
                        addr: l.addr,
                        state: if closed && l.state == LegState::Open {
                            "Closed".to_string()
                        } else {
                            format!("{:?}", l.state)
                        },
                        sent: known.then(|| out(l.hi)),
                        acked: known.then(|| cin(l.ack)),
                        window_edge: known.then(|| cin(l.edge)),
                        learned: l.learned,
                    }
                })
                .collect(),
        }
    }

    /// Per open leg: (replica, output lag, input lag), lags in bytes.
    /// (No allocation: the status walks every connection under the data
    /// plane's lock.)
    pub(crate) fn lags(&self) -> impl Iterator<Item = (ReplicaId, u64, u64)> + '_ {
        let max_ack = self
            .legs
            .iter()
            .filter(|o| o.open())
            .map(|o| o.ack)
            .reduce(|a, b| a.max(b));
        self.legs
            .iter()
            .filter(|l| l.state == LegState::Open)
            .map(move |l| {
                let max_ack = max_ack.unwrap_or(l.ack);
                (
                    l.replica,
                    self.sent_hi.diff(l.hi).max(0) as u64,
                    max_ack.diff(l.ack).max(0) as u64,
                )
            })
    }
}

/// A connection to test the pure pieces with: a client SYN from
/// 10.0.0.1:40000 to 10.0.0.100:80 and `legs` replicas that have not
/// answered yet.
#[cfg(test)]
pub(super) mod fixture {
    use super::*;
    use ftnet_wire::tcp::flags;

    pub(crate) const CLIENT_ISN: SeqNum = SeqNum(5000);
    /// Near the wrap of sequence space, so that the tests cross it.
    pub(crate) const ROUTER_ISN: SeqNum = SeqNum(0xffff_ff00);

    pub(crate) fn conn(legs: usize, voting: Voting) -> Conn {
        let key = ConnKey {
            client: Ipv4Addr::new(10, 0, 0, 1),
            cport: 40000,
            vip: Ipv4Addr::new(10, 0, 0, 100),
            vport: 80,
        };
        let syn = Seg {
            src: key.client,
            dst: key.vip,
            sport: key.cport,
            dport: key.vport,
            seq: CLIENT_ISN,
            ack: SeqNum(0),
            flags: flags::SYN,
            window: 65535,
            payload_len: 0,
            mss: Some(1460),
            wscale: Some(7),
            ts: Some((1, 0)),
            mode: CsumMode::Complete,
            at: Headers::BARE,
        };
        let mut c = Conn::new(
            key,
            ServiceId(0),
            Instant::ZERO,
            &syn,
            ROUTER_ISN,
            0,
            voting,
        );
        for r in 0..legs {
            let last = u8::try_from(r + 1).expect("a few legs");
            c.add_leg(ReplicaId(r), Ipv4Addr::new(10, 0, 1, last), Instant::ZERO);
        }
        c
    }

    /// What a connection may touch outside itself, owned by a test.
    #[derive(Default)]
    pub(crate) struct Outside {
        pub tx: VecDeque<Packet>,
        pub counters: Counters,
        pub out: Outbox,
        pub down: Vec<(ServiceId, ReplicaId, EvictReason)>,
        pub missed: Vec<(ServiceId, ReplicaId)>,
        pub challenges: ChallengeBudget,
    }

    impl Outside {
        pub(crate) fn ctx<'a>(&'a mut self, now: Instant, timeouts: &'a Timeouts) -> Ctx<'a> {
            Ctx {
                now,
                tx: &mut self.tx,
                counters: &mut self.counters,
                out: &mut self.out,
                timeouts,
                down: &mut self.down,
                missed: &mut self.missed,
                sequencer: true,
                challenges: &mut self.challenges,
                log_total: usize::MAX,
                quiet: false,
            }
        }
    }
}
