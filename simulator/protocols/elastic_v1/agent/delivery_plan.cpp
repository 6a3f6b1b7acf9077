#include "elastic_v1/agent/delivery_plan.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>

namespace tracecorr::elastic_v1::agent {
namespace {

constexpr std::size_t kRecentReads = 16;  // reads whose waits and periods are remembered
constexpr std::uint64_t kCountMax = 65535;  // the message's u16 count field (MSG-08)

template <class T>
void keep_recent(std::deque<T>& recent, T value) {
  recent.push_back(value);
  if (recent.size() > kRecentReads) recent.pop_front();
}

std::uint64_t messages_for(std::uint64_t samples) { return std::max<std::uint64_t>(1, (samples + kCountMax - 1) / kCountMax); }

void add_dropped(DeliveryCounts& counts, std::uint64_t samples) {
  counts.messages += messages_for(samples);
  counts.samples += samples;
}

}  // namespace

// ---- AgentReads ----------------------------------------------------------------------

void AgentReads::sent(std::uint64_t samples, DeliveryTime due, DeliveryTime late_after, std::uint64_t charge,
                      DeliveryTime now) {
  unread_.push_back({samples, due, late_after, now, charge});
  unread_bytes_ += charge;
  if (idle_since_) {
    if (idle_.size() < kMaxReadsKept) idle_.emplace_back(*idle_since_, now);
    idle_since_.reset();
  }
}

std::vector<AgentReads::Stretch> AgentReads::idle(DeliveryTime now) const {
  std::vector<Stretch> out = idle_;
  if (idle_since_ && out.size() < kMaxReadsKept) out.emplace_back(*idle_since_, now);
  return out;
}

void AgentReads::observe(std::uint64_t unread_bytes, DeliveryTime now, bool purged) {
  std::size_t read = 0;
  DeliveryTime oldest{};
  // Our datagrams leave the queue in the order sent: the unread are the last ones.
  while (!unread_.empty() && (unread_bytes_ > unread_bytes || unread_bytes == 0)) {
    const Unread& u = unread_.front();
    if (read++ == 0) oldest = u.queued;
    classify(u, now, purged);
    unread_bytes_ -= u.charge;
    unread_.pop_front();
  }
  if (unread_.empty()) {
    unread_bytes_ = 0;
    if (!idle_since_) idle_since_ = now;
  }
  if (read > 0 && !purged) on_read(oldest, read, now);
  last_look_read_ = read > 0;
  // What is still unread now is in the queue now: it holds at least that many (a sent() between two
  // looks may count datagrams the agent already read, so capacity is learned here, not there).
  if (unread_bytes == unread_bytes_) capacity_ = std::max(capacity_, unread_.size());
  last_look_ = now;
}

void AgentReads::classify(const Unread& u, DeliveryTime now, bool purged) {
  if (u.samples == 0) return;  // a registration
  // The last moment it was known to be unread: queued, or still there at the previous look.
  const DeliveryTime seen_unread = std::max(u.queued, last_look_);
  if (purged)
    outcomes_.unconfirmed.add(u.samples);
  else if (seen_unread > u.late_after)
    outcomes_.late.add(u.samples);
  else if (now <= u.due)
    outcomes_.in_time.add(u.samples);
  else
    outcomes_.unconfirmed.add(u.samples);  // read after due, not seen unread after late_after
}

void AgentReads::on_read(DeliveryTime oldest_queued, std::size_t datagrams, DeliveryTime now) {
  if (reads_ == 0 || now - last_read_end_ > kBurstGap) {  // a new read of the agent
    keep_recent(waits_, now - oldest_queued);
    // A datagram waiting since the end of the previous read: the gap is the agent's own period.
    if (reads_ > 0 && oldest_queued <= last_read_end_ + kBurstGap) keep_recent(periods_, now - last_read_end_);
    ++reads_;
    if (read_starts_.size() < kMaxReadsKept) read_starts_.push_back(now);
    this_read_ = 0;
  }
  last_read_end_ = now;
  this_read_ += datagrams;
  most_per_read_ = std::max(most_per_read_, this_read_);
}

void AgentReads::refused() {
  // What the look right before saw unread is what the queue held, unless the
  // agent was reading meanwhile (then the refusal came when it held more).
  if (!last_look_read_) capacity_ = std::max<std::size_t>(1, unread_.size());
}

void AgentReads::abandon() {
  for (const auto& u : unread_)
    if (u.samples > 0) outcomes_.unconfirmed.add(u.samples);
  unread_.clear();
  unread_bytes_ = 0;
  if (!idle_since_) idle_since_ = last_look_;
}

DeliveryDuration AgentReads::read_wait() const {
  if (waits_.empty()) return kUnknownReadWait;
  // The longest but one: a single stall of the agent (a starved thread) does not make every key look urgent.
  std::vector<DeliveryDuration> sorted(waits_.begin(), waits_.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted.size() >= 4 ? sorted[sorted.size() - 2] : sorted.back();
}

std::optional<DeliveryDuration> AgentReads::read_period() const {
  if (periods_.empty()) return std::nullopt;
  std::vector<DeliveryDuration> sorted(periods_.begin(), periods_.end());
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  return sorted[sorted.size() / 2];
}

DeliveryTime AgentReads::next_read(DeliveryTime now) const {
  if (!reads_seen()) return now + kUnknownReadWait;
  if (reads_at_once()) return now;
  const DeliveryTime next = last_read_end_ + read_period().value_or(read_wait());
  return std::max(next, now);
}

DeliveryTime AgentReads::reaches(DeliveryTime now) const {
  const DeliveryTime next = next_read(now);
  if (!reads_seen() || reads_at_once() || reads_until_empty()) return next;
  std::size_t ahead = unread_.size();
  // A read in progress takes the rest of its batch from those ahead (or all of them, when fewer).
  if (now - last_read_end_ <= kBurstGap) ahead -= std::min(ahead, capacity_ - std::min(capacity_, this_read_));
  return next + read_period().value_or(read_wait()) * static_cast<long>(ahead / capacity_);
}

std::optional<DeliveryTime> AgentReads::next_check() const {
  std::optional<DeliveryTime> first;
  for (const auto& u : unread_)
    if (u.samples > 0 && u.late_after != DeliveryTime::max() && (!first || u.late_after < *first))
      first = u.late_after;
  if (first) *first += std::chrono::microseconds(1);  // strictly after it
  return first;
}

// ---- DeliveryPlan ----------------------------------------------------------------------

bool DeliveryPlan::follow_thread(pid_t tid, const TransactionKey& now_in, DeliveryTime when) {
  auto it = threads_.find(tid);
  if (it == threads_.end()) {
    if (threads_.size() >= options_.max_threads) {
      transactions_[now_in].unfollowed = true;  // settles by time only
      return false;
    }
    threads_.emplace(tid, now_in);
    enter(now_in);
    return false;
  }
  if (it->second == now_in) return false;
  const bool settled = leave(it, when);
  threads_.emplace(tid, now_in);
  enter(now_in);
  return settled;
}

void DeliveryPlan::enter(const TransactionKey& tk) {
  Transaction& t = transactions_[tk];
  ++t.threads_in;
  t.left = {};  // it runs (again)
}

// The thread is no longer in its transaction: one fewer keeps it open.
bool DeliveryPlan::leave(std::unordered_map<pid_t, TransactionKey>::iterator thread, DeliveryTime when) {
  bool settled = false;
  if (auto t = transactions_.find(thread->second); t != transactions_.end()) {
    if (t->second.threads_in > 0) --t->second.threads_in;
    if (t->second.threads_in == 0) t->second.left = when;
    settled = t->second.threads_in == 0 && t->second.pending_keys > 0;
    if (t->second.threads_in == 0 && t->second.pending_keys == 0) transactions_.erase(t);
  }
  threads_.erase(thread);
  return settled;
}

bool DeliveryPlan::left(pid_t tid, DeliveryTime when) {
  auto it = threads_.find(tid);
  return it != threads_.end() && leave(it, when);
}

// Past this the agent has had every right to export: every thread seen in the
// transaction was sampled elsewhere by then. max(): not known (a thread still
// in it, one not followed, or settled by time).
DeliveryTime DeliveryPlan::late_after(const Transaction& t) const {
  if (t.threads_in > 0 || t.unfollowed || t.left == DeliveryTime{}) return DeliveryTime::max();
  return std::max(t.left, t.last_sample) + options_.samples_delay;
}

bool DeliveryPlan::add(const CorrelationKey& key, pid_t tid, DeliveryTime when) {
  ++stats_.samples;
  const TransactionKey tk = transaction_of(key);
  const bool settled_one = follow_thread(tid, tk, when);
  Transaction& t = transactions_[tk];
  t.last_sample = std::max(t.last_sample, when);
  auto [it, inserted] = pending_.try_emplace(key);
  if (inserted) ++t.pending_keys;
  ++it->second.count;
  ++pending_samples_;
  if (auto h = history_.find(key); h != history_.end()) {
    ++h->second.samples;
  } else if (history_.size() < options_.max_history) {
    history_.emplace(key, History{when, 1});
  } else {
    history_overflow_ = true;
  }
  if (history_.count(key)) {
    auto& last = last_sample_[tk];
    last = std::max(last, when);
  }
  if (pending_.size() > options_.max_keys) drop_lightest();
  return settled_one;
}

// Past max_keys, the lightest sixteenth goes at once: one pass, not one per sample.
void DeliveryPlan::drop_lightest() {
  std::vector<std::pair<std::uint64_t, CorrelationKey>> by_count;
  by_count.reserve(pending_.size());
  for (const auto& [k, p] : pending_) by_count.emplace_back(p.count, k);
  const std::size_t n = std::max<std::size_t>(1, pending_.size() / 16);
  std::nth_element(by_count.begin(), by_count.begin() + (n - 1), by_count.end());
  for (std::size_t i = 0; i < n; ++i) {
    auto it = pending_.find(by_count[i].second);
    add_dropped(stats_.queue_full, it->second.count);
    forget(it);
  }
}

void DeliveryPlan::forget(std::map<CorrelationKey, Pending>::iterator it) {
  if (auto t = transactions_.find(transaction_of(it->first)); t != transactions_.end()) {
    if (t->second.pending_keys > 0) --t->second.pending_keys;
    if (t->second.pending_keys == 0 && t->second.threads_in == 0) transactions_.erase(t);
  }
  pending_samples_ -= it->second.count;
  pending_.erase(it);
}

bool DeliveryPlan::settled(const Transaction& t, DeliveryTime now) const {
  return (t.threads_in == 0 && !t.unfollowed) || now - t.last_sample >= options_.settle;
}

// How far before its due a read is planned to take a datagram: the reads'
// jitter (the longest wait beyond the period) and a quarter period, at least 10 ms.
DeliveryDuration DeliveryPlan::read_margin(const AgentReads& reads, DeliveryDuration period) const {
  const DeliveryDuration jitter = std::max(DeliveryDuration::zero(), reads.read_wait() - period);
  return jitter + std::max<DeliveryDuration>(std::chrono::milliseconds(10), period / 4);
}

// How long before its due a datagram must be queued to be read in time.
DeliveryDuration DeliveryPlan::lead(const AgentReads& reads) const {
  const DeliveryDuration wait = reads.read_wait();
  return wait + std::max<DeliveryDuration>(std::chrono::milliseconds(10), wait / 4);
}

void DeliveryPlan::expire(DeliveryTime now, bool sendable) {
  DeliveryCounts& cause = sendable ? stats_.expired : stats_.unsendable;
  for (auto t = transactions_.begin(); t != transactions_.end();) {
    const auto next = std::next(t);  // forget() erases t with its last key
    if (t->second.pending_keys > 0 && due(t->second) < now) {
      // Its keys are contiguous in pending_ (ordered by trace, transaction, stack).
      const TransactionKey tk = t->first;
      auto it = pending_.lower_bound(CorrelationKey{tk.trace, tk.transaction, StackTraceId{}});
      while (it != pending_.end() && transaction_of(it->first) == tk) {
        auto after = std::next(it);
        add_dropped(cause, it->second.count);
        forget(it);
        it = after;
      }
    }
    t = next;
  }
}

namespace {
struct Candidate {
  const CorrelationKey* key;
  std::uint64_t count;
  DeliveryTime due;
  DeliveryTime last_read;  // the last read that helps: by due, and before the run ends
  DeliveryTime late_after;
  bool eligible;
  bool next_read;  // the reads to come cannot take it later
};

// Job sequencing with deadlines: heaviest first, each to the latest read
// before its due that has room; those placed at the first read must go now.
void place_on_reads(std::vector<Candidate>& cands, DeliveryTime first_read, DeliveryDuration period,
                    DeliveryDuration margin, std::size_t room, std::size_t per_read) {
  constexpr long kMaxReads = 4096;
  std::vector<long> last(cands.size());
  long horizon = 0;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    const auto slack = cands[i].last_read - margin - first_read;
    last[i] = slack <= DeliveryDuration::zero() ? 0 : std::min<long>(kMaxReads, slack / period);
    horizon = std::max(horizon, last[i]);
  }
  std::vector<std::size_t> left(horizon + 1, per_read);
  left[0] = room;
  std::vector<long> latest_free(horizon + 2);  // union-find over reads, shifted by one (0: none)
  std::iota(latest_free.begin(), latest_free.end(), 0);
  auto find = [&](long r) {
    while (latest_free[r] != r) r = latest_free[r] = latest_free[latest_free[r]];
    return r;
  };
  for (long r = 0; r <= horizon; ++r)
    if (left[r] == 0) latest_free[r + 1] = r;
  std::vector<std::size_t> order(cands.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return cands[a].count != cands[b].count ? cands[a].count > cands[b].count : cands[a].due < cands[b].due;
  });
  for (std::size_t i : order) {
    const long slot = find(last[i] + 1);
    if (slot == 0) continue;  // every read before its due is taken by heavier keys
    cands[i].next_read = slot == 1;
    if (--left[slot - 1] == 0) latest_free[slot] = slot - 1;
  }
}
}  // namespace

std::vector<Offer> DeliveryPlan::choose(DeliveryTime now, const AgentReads& reads, std::size_t limit,
                                        bool final) const {
  const DeliveryTime first_read = reads.reaches(now);  // the read a datagram sent now joins
  const DeliveryDuration lead_time = lead(reads);
  std::vector<Candidate> cands;
  for (const auto& [key, p] : pending_) {
    const Transaction& t = transactions_.at(transaction_of(key));
    const DeliveryTime d = due(t);
    if (d < first_read) continue;  // cannot be read in time: it expires
    // Settled: complete, worth a datagram now. Urgent: its last chance, complete or not.
    cands.push_back({&key, p.count, d, std::min(d, horizon_), late_after(t), final || settled(t, now),
                     now >= d - lead_time});
  }
  if (cands.empty() || limit == 0) return {};
  // An agent reading at periods: which keys the next read must take is the
  // placement's to say (over the reads to come); one reading at once: the urgent.
  if (!reads.reads_at_once() && cands.size() > reads.room()) {
    const DeliveryDuration period = reads.read_period().value_or(reads.read_wait());
    for (auto& c : cands) c.next_read = false;
    if (period > DeliveryDuration::zero())
      place_on_reads(cands, first_read, period, read_margin(reads, period), reads.room(), reads.capacity());
  }
  std::vector<const Candidate*> order;
  for (const auto& c : cands)
    if (c.next_read || c.eligible) order.push_back(&c);
  std::sort(order.begin(), order.end(), [](const Candidate* a, const Candidate* b) {
    if (a->next_read != b->next_read) return a->next_read;
    return a->count != b->count ? a->count > b->count : a->due < b->due;
  });
  std::vector<Offer> offers;
  for (const Candidate* c : order) {
    if (offers.size() >= limit) break;
    offers.push_back({*c->key, static_cast<std::uint16_t>(std::min(c->count, kCountMax)), c->due, c->late_after});
  }
  return offers;
}

std::optional<Offer> DeliveryPlan::current(const CorrelationKey& key) const {
  auto it = pending_.find(key);
  if (it == pending_.end() || it->second.count == 0) return std::nullopt;
  const Transaction& t = transactions_.at(transaction_of(key));
  return Offer{key, static_cast<std::uint16_t>(std::min(it->second.count, kCountMax)), due(t), late_after(t)};
}

void DeliveryPlan::sent(const Offer& offer) {
  auto it = pending_.find(offer.key);
  if (it == pending_.end()) return;
  const std::uint64_t n = std::min<std::uint64_t>(offer.count, it->second.count);
  if (n == it->second.count) {
    forget(it);
    return;
  }
  it->second.count -= n;
  pending_samples_ -= n;
}

void DeliveryPlan::unsendable(const Offer& offer) {
  if (auto it = pending_.find(offer.key); it != pending_.end()) stats_.unsendable.add(std::min<std::uint64_t>(offer.count, it->second.count));
  sent(offer);
}

void DeliveryPlan::abandon() {
  for (const auto& [key, p] : pending_) add_dropped(stats_.unsendable, p.count);
  pending_.clear();
  transactions_.clear();
  threads_.clear();
  pending_samples_ = 0;
}

DeliveryTime DeliveryPlan::next_action(DeliveryTime now, const AgentReads& reads) const {
  DeliveryTime next = DeliveryTime::max();
  const DeliveryDuration lead_time = lead(reads);
  for (const auto& [tk, t] : transactions_) {
    if (t.pending_keys == 0) continue;
    const DeliveryTime d = due(t);
    next = std::min(next, d);  // it expires
    if (settled(t, now)) {
      if (reads.room() > 0) return now;  // otherwise the agent's next read prompts
      continue;
    }
    next = std::min({next, t.last_sample + options_.settle, d - lead_time});
  }
  return std::max(next, now);
}

CapacityBound DeliveryPlan::bound(const AgentReads& reads, DeliveryTime end) const {
  CapacityBound b;
  b.correlated = stats_.samples;
  b.keys = history_.size();
  b.history_overflow = history_overflow_;
  b.datagrams_per_read = reads.capacity();
  const auto period = reads.read_period();
  if (!period || *period <= DeliveryDuration::zero() || history_.empty()) {
    b.samples = b.correlated;  // the agent read each datagram as it came (or nothing was correlated)
    return b;
  }
  std::vector<BoundJob> jobs;
  jobs.reserve(history_.size());
  std::uint64_t remembered = 0;
  DeliveryTime start = DeliveryTime::max();
  for (const auto& [key, h] : history_) {
    jobs.push_back({h.first, last_sample_.at(transaction_of(key)) + options_.samples_delay, h.samples});
    remembered += h.samples;
    start = std::min(start, h.first);
  }
  b.read_period = *period;
  // Samples of keys beyond the history are counted as if they could all be read: still an upper bound.
  b.samples = capacity_bound(jobs, reads_of_run(reads.read_starts(), reads.idle(end), start, std::max(end, start), *period),
                             b.datagrams_per_read) +
              (b.correlated - remembered);
  b.limited = b.samples < b.correlated;
  return b;
}

// ---- capacity_bound ------------------------------------------------------------------------
namespace {

struct PlacedJob {
  long lo, hi;  // the reads that could carry it
  std::uint64_t samples;
};

// Jobs placed on reads (each with its capacity), with a segment tree over the
// reads telling, for a range of them, whether one has room and which placed
// job reaches furthest left and right: what the augmenting search needs.
class ReadPlacement {
 public:
  ReadPlacement(const std::vector<PlacedJob>& jobs, std::vector<long> capacity)
      : jobs_(jobs), capacity_(std::move(capacity)), at_(capacity_.size()), where_(jobs.size(), -1) {
    const long reads = static_cast<long>(capacity_.size());
    while (size_ < reads) size_ <<= 1;
    tree_.assign(2 * size_, Node{});
    for (long p = 0; p < reads; ++p) tree_[size_ + p].room = capacity_[p];
    for (long i = size_ - 1; i >= 1; --i) tree_[i] = combine(tree_[2 * i], tree_[2 * i + 1]);
  }

  // Places job j if the placed ones can make room for it (moving each within its own reads).
  bool insert(int j) {
    std::vector<Region> regions{{jobs_[j].lo, jobs_[j].hi, -1}};
    long left = jobs_[j].lo, right = jobs_[j].hi;
    for (;;) {
      if (long free = find_room(1, 0, size_ - 1, left, right); free >= 0) {
        augment(j, free, regions);
        return true;
      }
      const Node reach = query(left, right);  // every read in [left, right] is full
      bool grew = false;
      if (reach.min_lo < left) {
        regions.push_back({reach.min_lo, left - 1, reach.min_lo_job});
        grew = true;
      }
      if (reach.max_hi > right) {
        regions.push_back({right + 1, reach.max_hi, reach.max_hi_job});
        grew = true;
      }
      if (!grew) return false;
      left = std::min(left, reach.min_lo);
      right = std::max(right, reach.max_hi);
    }
  }

 private:
  struct Node {
    long room = 0;
    long min_lo = std::numeric_limits<long>::max();
    int min_lo_job = -1;
    long max_hi = std::numeric_limits<long>::min();
    int max_hi_job = -1;
  };
  struct Region {
    long first, last;
    int moved;  // the placed job that reaches it (-1: the new job's own reads)
  };
  static Node combine(const Node& a, const Node& b) {
    Node n;
    n.room = std::max(a.room, b.room);
    std::tie(n.min_lo, n.min_lo_job) = a.min_lo <= b.min_lo ? std::tie(a.min_lo, a.min_lo_job) : std::tie(b.min_lo, b.min_lo_job);
    std::tie(n.max_hi, n.max_hi_job) = a.max_hi >= b.max_hi ? std::tie(a.max_hi, a.max_hi_job) : std::tie(b.max_hi, b.max_hi_job);
    return n;
  }
  Node query(long l, long r) const {
    Node out;
    for (l += size_, r += size_ + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1) out = combine(out, tree_[l++]);
      if (r & 1) out = combine(out, tree_[--r]);
    }
    return out;
  }
  long find_room(long node, long first, long last, long l, long r) const {
    if (last < l || first > r || tree_[node].room == 0) return -1;
    if (first == last) return first;
    const long mid = (first + last) / 2;
    if (long found = find_room(2 * node, first, mid, l, r); found >= 0) return found;
    return find_room(2 * node + 1, mid + 1, last, l, r);
  }
  void refresh(long point) {
    Node& leaf = tree_[size_ + point];
    leaf = Node{};
    leaf.room = capacity_[point] - static_cast<long>(at_[point].size());
    for (int job : at_[point]) {
      if (jobs_[job].lo < leaf.min_lo) leaf.min_lo = jobs_[job].lo, leaf.min_lo_job = job;
      if (jobs_[job].hi > leaf.max_hi) leaf.max_hi = jobs_[job].hi, leaf.max_hi_job = job;
    }
    for (long i = (size_ + point) / 2; i >= 1; i /= 2) tree_[i] = combine(tree_[2 * i], tree_[2 * i + 1]);
  }
  void place(int job, long point) {
    at_[point].push_back(job);
    where_[job] = point;
    refresh(point);
  }
  void unplace(int job, long point) {
    auto& here = at_[point];
    here.erase(std::find(here.begin(), here.end(), job));
    refresh(point);
  }
  // Walks back from the read with room: each region's job moves there, freeing its old read.
  void augment(int j, long point, const std::vector<Region>& regions) {
    for (;;) {
      const Region& r = *std::find_if(regions.begin(), regions.end(),
                                      [&](const Region& x) { return x.first <= point && point <= x.last; });
      if (r.moved < 0) {
        place(j, point);
        return;
      }
      const long from = where_[r.moved];
      unplace(r.moved, from);
      place(r.moved, point);
      point = from;
    }
  }

  const std::vector<PlacedJob>& jobs_;
  std::vector<long> capacity_;
  long size_ = 1;
  std::vector<Node> tree_;
  std::vector<std::vector<int>> at_;
  std::vector<long> where_;
};

}  // namespace

std::vector<DeliveryTime> reads_of_run(const std::vector<DeliveryTime>& seen,
                                       const std::vector<AgentReads::Stretch>& idle, DeliveryTime start,
                                       DeliveryTime end, DeliveryDuration period) {
  std::vector<DeliveryTime> reads;
  if (period <= DeliveryDuration::zero() || end < start) return reads;
  auto was_idle = [&](DeliveryTime t) {  // idle is in time order
    auto it = std::upper_bound(idle.begin(), idle.end(), t,
                               [](DeliveryTime x, const AgentReads::Stretch& s) { return x < s.first; });
    return it != idle.begin() && t <= std::prev(it)->second;
  };
  auto fill = [&](DeliveryTime from, DeliveryTime to) {  // a read every period strictly between, if the gap is long
    if (to - from <= period + period / 2) return;
    for (DeliveryTime t = from + period; t < to - period / 2; t += period)
      if (was_idle(t)) reads.push_back(t);
  };
  DeliveryTime last = start - period;  // as if a read had just happened before the first sample
  for (DeliveryTime t : seen) {
    if (t < start || t > end) continue;
    fill(last, t);
    reads.push_back(t);
    last = t;
  }
  fill(last, end + period);
  return reads;
}

std::uint64_t capacity_bound(const std::vector<BoundJob>& jobs, const std::vector<DeliveryTime>& reads,
                             std::size_t per_read) {
  if (per_read == 0 || reads.empty()) return 0;
  // Past this many reads, neighbouring reads are merged into one group (their
  // capacities added, any job reaching one of them reaching the group): every
  // job keeps at least its reads, so it stays an upper bound.
  constexpr std::size_t kMaxGroups = 1 << 16;
  const std::size_t merge = (reads.size() + kMaxGroups - 1) / kMaxGroups;
  std::vector<DeliveryTime> first_of, last_of;
  std::vector<long> capacity;
  for (std::size_t i = 0; i < reads.size(); i += merge) {
    const std::size_t n = std::min(merge, reads.size() - i);
    first_of.push_back(reads[i]);
    last_of.push_back(reads[i + n - 1]);
    capacity.push_back(static_cast<long>(n * per_read));
  }
  std::vector<PlacedJob> placed;
  for (const auto& j : jobs) {
    if (j.samples == 0) continue;
    // The first group that ends at or after the first sample, the last that begins at or before due.
    const long lo = std::lower_bound(last_of.begin(), last_of.end(), j.first) - last_of.begin();
    const long hi = std::upper_bound(first_of.begin(), first_of.end(), j.due) - first_of.begin() - 1;
    if (lo <= hi) placed.push_back({lo, hi, j.samples});
  }
  std::sort(placed.begin(), placed.end(), [](const PlacedJob& a, const PlacedJob& b) { return a.samples > b.samples; });
  ReadPlacement placement(placed, std::move(capacity));
  std::uint64_t carried = 0;
  for (std::size_t i = 0; i < placed.size(); ++i)
    if (placement.insert(static_cast<int>(i))) carried += placed[i].samples;
  return carried;
}

}  // namespace tracecorr::elastic_v1::agent
