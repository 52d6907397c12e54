// torch.ops.fastprep.http_get: a batch of HTTP/1.1 GET requests to one server (an S3-compatible
// endpoint over plain http://), many in flight at once on keep-alive connections, run by one
// epoll loop in the calling thread without the GIL. The requests arrive fully written (request
// line, headers, signature: fastprep/data/_native_s3.py builds them); this file only moves bytes:
// non-blocking connects, sends, response parsing (Content-Length, chunked, or to the end of the
// connection; framing that could be read two ways is malformed, 1xx interim responses are skipped),
// each body received straight into its tensor, and a deadline per request. It never
// retries: a failed request comes back with a negative status and its reason, and the caller
// retries with backoff (the caller owns the retry budget). Idle keep-alive connections are kept
// in a per-process pool per address and reused by later calls; a forked child drops its parent's.
// Built with OpenSSL (FASTPREP_HAVE_OPENSSL, setup.py), `tls` speaks HTTPS: a TLS 1.2+ handshake
// in the same loop, the server's certificate verified against the system's CAs (or `ca_file`)
// and its name against `server_name` (also sent as SNI). Through a proxy, `tunnel` is a CONNECT
// request sent first on each new connection (the address is then the proxy's); requests in
// absolute form through an http proxy need nothing here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "exit_gate.h"

#ifdef FASTPREP_HAVE_OPENSSL
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

namespace fastprep {
namespace {

// Negative statuses (a request that got no complete response); the caller maps them to messages.
enum Failure : int64_t {
  kConnect = -1, kReset = -2, kTimeout = -3, kMalformed = -4, kTooLarge = -5, kTls = -6, kProxy = -7
};

#ifdef FASTPREP_HAVE_OPENSSL
using Tls = SSL;
// The client context for a CA file ("" = the system's CAs), made once and kept.
SSL_CTX* tls_context(const std::string& ca_file, std::string& error) {
  static std::mutex mutex;
  static std::map<std::string, SSL_CTX*> contexts;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = contexts.find(ca_file);
  if (found != contexts.end()) return found->second;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return error = "SSL_CTX_new failed", nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);  // a body ended by closing, as over plain http
#endif
  int ok = ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx)
                           : SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr);
  if (ok != 1) {
    SSL_CTX_free(ctx);
    return error = "cannot load the CA certificates" + (ca_file.empty() ? std::string() : " of " + ca_file), nullptr;
  }
  contexts[ca_file] = ctx;
  return ctx;
}
void tls_free(Tls* tls) { SSL_free(tls); }
#else
struct Tls {};
void tls_free(Tls*) {}
#endif

// An idle keep-alive connection: its socket and, on HTTPS, its TLS session.
struct Idle {
  int fd = -1;
  Tls* tls = nullptr;
};

void close_idle(const Idle& idle) {
  if (idle.tls != nullptr) tls_free(idle.tls);  // no close_notify: the socket just closes
  if (idle.fd >= 0) ::close(idle.fd);
}

constexpr size_t kMaxHead = 64 << 10;  // headers (also of 1xx responses, or trailers) longer are malformed
constexpr size_t kPoolCap = 1024;      // idle connections kept per address at most
// Requests are never pipelined: a byte after the end of a response's framing means the framing is
// not the one the server meant, and the body may not be the bytes it meant either.
constexpr const char* kSurplus = "bytes past the end of the response";

// ---------------------------------------------------------------- the per-process pool

struct Pool {
  std::mutex mutex;
  pid_t pid = 0;
  std::map<std::string, std::vector<Idle>> idle;  // address -> idle keep-alive connections

  // An idle connection for `address` (fd -1: none). A child of fork drops the parent's
  // (closing its copies leaves the parent's open) instead of sharing their byte streams.
  Idle take(const std::string& address) {
    std::lock_guard<std::mutex> lock(mutex);
    if (pid != getpid()) {
      for (auto& entry : idle)
        for (const Idle& i : entry.second) close_idle(i);
      idle.clear();
      pid = getpid();
    }
    auto& conns = idle[address];
    if (conns.empty()) return {};
    Idle out = conns.back();
    conns.pop_back();
    return out;
  }

  void give(const std::string& address, Idle conn) {
    std::lock_guard<std::mutex> lock(mutex);
    auto& conns = idle[address];
    if (pid != getpid() || conns.size() >= kPoolCap) {
      close_idle(conn);
      return;
    }
    conns.push_back(conn);
  }
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: sockets may be returned during interpreter exit
  return *p;
}

std::atomic<int64_t> g_in_flight{0};

// ---------------------------------------------------------------- one connection's state

enum class Stage {
  kConnecting, kTunnelSend, kTunnelHead, kHandshake, kSending, kHead, kBody, kChunkSize, kChunkData, kChunkEnd,
  kTrailer, kToClose
};

struct Conn {
  int fd = -1;
  Tls* tls = nullptr;      // the TLS session on HTTPS
  bool reused = false;     // came from the pool (a stale one may be closed by the server)
  int64_t request = -1;    // the request it carries, -1: none
  Stage stage = Stage::kSending;
  size_t sent = 0;
  std::string head;        // response bytes until the end of the headers (then the surplus)
  int64_t status = 0;
  bool keep_alive = true;
  int64_t length = -1;     // Content-Length, -1: none
  at::Tensor body;         // Content-Length bodies: received in place
  int64_t got = 0;
  std::string chunks;      // chunked or to-close bodies
  std::string line;        // a chunk-size line being read
  int64_t chunk_left = 0;
  size_t extra = 0;        // bytes of interim (1xx) responses and trailers so far
  int64_t range[3] = {-1, -1, -1};  // Content-Range: first, last, size (-1: "*"); first -1 none, -2 unreadable
  bool watching_out = false;  // EPOLLOUT is in its event mask (while connecting or sending)
  std::chrono::steady_clock::time_point deadline;
};

struct Address {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

bool parse_address(const std::string& host, int64_t port, Address& out) {
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    out.len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.addr);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    out.len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// A decimal number of at most 18 digits (no sign, no spaces); -1 otherwise.
int64_t decimal(const std::string& s, size_t from, size_t to) {
  if (from >= to || to - from > 18) return -1;
  int64_t n = 0;
  for (size_t i = from; i < to; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    n = n * 10 + (s[i] - '0');
  }
  return n;
}

// Content-Range's "bytes first-last/size" (size "*": -1) into out; false: another form.
bool parse_content_range(const std::string& v, int64_t out[3]) {
  size_t dash = v.find('-'), slash = v.find('/');
  if (v.compare(0, 6, "bytes ") != 0 || dash == std::string::npos || slash == std::string::npos || dash > slash)
    return false;
  int64_t first = decimal(v, 6, dash), last = decimal(v, dash + 1, slash);
  int64_t size = v.compare(slash + 1, std::string::npos, "*") == 0 ? -1 : decimal(v, slash + 1, v.size());
  if (first < 0 || last < first || (size != -1 && size <= last)) return false;
  out[0] = first, out[1] = last, out[2] = size;
  return true;
}

// Parses the status line and headers in conn.head[0, end) and sets the body's framing (RFC 9112
// section 6.3); false: malformed. Framing that could be read two ways (Content-Length values that
// differ, a transfer coding other than chunked alone) is malformed: either reading could hand back
// bytes that are not the body's.
bool parse_head(Conn& c, size_t end) {
  const std::string& h = c.head;
  size_t eol = h.find("\r\n");
  if (eol == std::string::npos || eol > end || h.compare(0, 5, "HTTP/") != 0) return false;
  size_t sp = h.find(' ');
  if (sp == std::string::npos || sp + 4 > eol || (sp + 4 < eol && h[sp + 4] != ' ')) return false;
  int64_t status = decimal(h, sp + 1, sp + 4);
  if (status < 100) return false;
  c.status = status;
  c.keep_alive = h.compare(0, 8, "HTTP/1.0") != 0;
  c.length = -1;
  c.range[0] = c.range[1] = c.range[2] = -1;
  std::string codings;
  size_t pos = eol + 2;
  while (pos < end) {
    size_t next = h.find("\r\n", pos);
    if (next == std::string::npos || next > end) next = end;
    size_t colon = h.find(':', pos);
    if (colon == std::string::npos || colon >= next || colon == pos) return false;
    std::string name = lower(h.substr(pos, colon - pos));
    if (name.find_first_of(" \t") != std::string::npos) return false;  // and obs-fold continuation lines
    size_t v = colon + 1;
    while (v < next && (h[v] == ' ' || h[v] == '\t')) v++;
    std::string value = lower(h.substr(v, next - v));
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
    if (name == "content-length") {
      int64_t length = decimal(value, 0, value.size());
      if (length < 0 || (c.length >= 0 && c.length != length)) return false;
      c.length = length;
    } else if (name == "transfer-encoding") {
      codings += (codings.empty() ? "" : ",") + value;
    } else if (name == "content-range") {
      int64_t range[3];
      if (c.range[0] == -2 || !parse_content_range(value, range) ||
          (c.range[0] >= 0 && !std::equal(range, range + 3, c.range)))
        c.range[0] = -2;
      else
        std::copy(range, range + 3, c.range);
    } else if (name == "connection") {
      if (value.find("close") != std::string::npos) c.keep_alive = false;
      if (value.find("keep-alive") != std::string::npos) c.keep_alive = true;
    }
    pos = next + 2;
  }
  if (status < 200) return true;  // an interim response: no body, the final response follows
  if (!codings.empty()) {
    if (codings != "chunked") return false;  // only chunked is decoded
    if (c.length >= 0) c.keep_alive = false;  // both: chunked wins, and the connection is not trusted again
    c.length = -1;
    c.stage = Stage::kChunkSize;
  } else if (status == 204 || status == 304) {
    c.length = 0;
    c.stage = Stage::kBody;
  } else if (c.length >= 0) {
    c.stage = Stage::kBody;
  } else {
    c.stage = Stage::kToClose;
    c.keep_alive = false;
  }
  return true;
}

class Batch {
 public:
  Batch(const std::string& key, const Address& address, const std::vector<std::string>& heads, int64_t concurrency,
        double timeout_s, int64_t max_body, void* tls_ctx, const std::string& server_name,
        const std::string& tunnel)
      : key_(key), address_(address), heads_(heads), tls_ctx_(tls_ctx), server_name_(server_name), tunnel_(tunnel),
        timeout_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                         std::chrono::duration<double>(timeout_s))),
        max_body_(max_body), n_((int64_t)heads.size()), bodies_((size_t)n_), errors_((size_t)n_),
        resent_((size_t)n_, 0) {
    status_ = at::zeros({n_}, at::kLong);
    heads_info_ = at::full({n_, 4}, -1, at::kLong);
    conns_.resize((size_t)std::max<int64_t>(1, std::min(concurrency, n_)));
  }

  ~Batch() {
    if (ep_ >= 0) ::close(ep_);
    for (Conn& c : conns_) close_idle({c.fd, c.tls});
  }

  void run() {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) {
      for (int64_t i = 0; i < n_; i++) fail_request(i, kConnect, "epoll_create1: " + std::string(strerror(errno)));
      return;
    }
    for (size_t k = 0; k < conns_.size(); k++) start_next(k);
    std::vector<epoll_event> events(conns_.size());
    // Woken at least every 50 ms to see whether the interpreter is exiting (exit_gate.h): then the
    // requests left fail at once and the call ends (its thread parks) instead of running on into
    // the process's teardown.
    while (done_ < n_ && !exiting()) {
      auto now = std::chrono::steady_clock::now();
      auto wait = std::chrono::milliseconds(50);
      for (size_t k = 0; k < conns_.size(); k++) {
        if (conns_[k].request < 0) continue;
        if (conns_[k].deadline <= now) {
          fail_conn(k, kTimeout, "no complete response within the timeout");
          start_next(k);
          continue;
        }
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(conns_[k].deadline - now) +
                                  std::chrono::milliseconds(1));
      }
      if (done_ >= n_) break;
      int n = epoll_wait(ep_, events.data(), (int)events.size(), (int)wait.count());
      if (n < 0 && errno != EINTR) break;
      for (int e = 0; e < n; e++) {
        size_t k = events[e].data.u32;
        if (conns_[k].request >= 0) step(k, events[e].events);
      }
    }
    const std::string why = exiting() ? "the interpreter is exiting" : "epoll_wait: " + std::string(strerror(errno));
    for (int64_t i = 0; i < n_; i++)  // reached on exit, or where epoll_wait itself failed
      if (!bodies_[i].defined()) fail_request(i, kConnect, why);
  }

  std::tuple<std::vector<at::Tensor>, at::Tensor, std::vector<std::string>, at::Tensor, at::Tensor> result() {
    at::Tensor stats = at::empty({3}, at::kLong);
    stats[0] = started_;
    stats[1] = in_flight_sum_;
    stats[2] = max_in_flight_;
    return {bodies_, status_, errors_, heads_info_, stats};
  }

 private:
  void fail_request(int64_t i, int64_t code, const std::string& why) {
    status_.data_ptr<int64_t>()[i] = code;
    bodies_[i] = at::empty({0}, at::kByte);
    errors_[i] = why;
    done_++;
  }

  void close_conn(size_t k) {
    Conn& c = conns_[k];
    if (c.fd >= 0) epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    close_idle({c.fd, c.tls});
    c.fd = -1;
    c.tls = nullptr;
    c.watching_out = false;
  }

  void finish(size_t k) {
    g_in_flight--;
    conns_[k].request = -1;
  }

  void fail_conn(size_t k, int64_t code, const std::string& why) {
    Conn& c = conns_[k];
    // a reused connection the server had closed while idle: the request never reached it,
    // so it is sent again, once, on another connection (not a retry of the caller's budget)
    if (c.reused && code == kReset && c.got == 0 && c.head.empty() && c.extra == 0 && !resent_[(size_t)c.request]) {
      int64_t request = c.request;
      resent_[(size_t)request] = 1;
      close_conn(k);
      finish(k);
      pending_.push_front(request);
      return;
    }
    int64_t request = c.request;
    close_conn(k);
    finish(k);
    fail_request(request, code, why);
  }

  bool open(size_t k) {
    Conn& c = conns_[k];
    // a request sent again after a stale pooled connection goes on a new one: others may be stale too
    Idle idle = resent_[(size_t)c.request] ? Idle{} : pool().take(key_);
    while (idle.fd >= 0 && !quiet(idle)) {
      close_idle(idle);
      idle = pool().take(key_);
    }
    c.fd = idle.fd;
    c.tls = idle.tls;
    c.reused = c.fd >= 0;
    if (c.reused) {
      c.stage = Stage::kSending;
    } else {
      c.fd = ::socket(address_.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c.fd < 0) return false;
      int one = 1;
      setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (!start_tls(c)) return false;
      int r = ::connect(c.fd, reinterpret_cast<const sockaddr*>(&address_.addr), address_.len);
      if (r < 0 && errno != EINPROGRESS) return false;
      c.stage = r != 0 ? Stage::kConnecting : connected(c);
    }
    c.watching_out = c.stage == Stage::kConnecting;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (c.watching_out ? EPOLLOUT : 0u);
    ev.data.u32 = (uint32_t)k;
    return epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev) == 0;
  }

  // Whether an idle connection has nothing to read, as it should: the server's close (an idle
  // timeout), or bytes it sent past its last response, and it is not used again.
  static bool quiet(const Idle& idle) {
    char byte;
    return ::recv(idle.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  // The stage that follows a new connection's connect.
  Stage connected(const Conn& c) const {
    return !tunnel_.empty() ? Stage::kTunnelSend : c.tls != nullptr ? Stage::kHandshake : Stage::kSending;
  }

  // Through a proxy, the CONNECT request and its answer, on the bare socket; false once the
  // request has failed. A 2xx answer opens the tunnel (it has no body, and the server behind it
  // does not speak first: any byte past the answer's head is malformed).
  bool tunnel(size_t k) {
    Conn& c = conns_[k];
    std::string why;
    while (c.stage == Stage::kTunnelSend) {
      ssize_t w = io(k, const_cast<char*>(tunnel_.data()) + c.sent, tunnel_.size() - c.sent, true, why);
      if (w == -1) return true;
      if (w <= 0) return fail_conn(k, kConnect, "proxy: " + (w == 0 ? "send: connection closed" : why)), false;
      c.sent += (size_t)w;
      if (c.sent == tunnel_.size()) {
        c.sent = 0;
        c.stage = Stage::kTunnelHead;
        watch_out(k, false);
      }
    }
    char buffer[4096];
    for (;;) {
      ssize_t r = io(k, buffer, sizeof buffer, false, why);
      if (r == -1) return true;
      if (r <= 0) return fail_conn(k, kConnect, "proxy: " + (r == 0 ? "connection closed by the proxy" : why)), false;
      c.head.append(buffer, (size_t)r);
      size_t end = c.head.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (c.head.size() > kMaxHead) return fail_conn(k, kMalformed, "proxy: response headers too long"), false;
        continue;
      }
      std::string line = c.head.substr(0, c.head.find("\r\n"));
      int64_t status = line.compare(0, 5, "HTTP/") == 0 && line.find(' ') != std::string::npos
                           ? decimal(line, line.find(' ') + 1, std::min(line.size(), line.find(' ') + 4))
                           : -1;
      if (status < 200 || status > 299 || c.head.size() != end + 4) {
        bool lasting = status >= 400 && status < 500;  // refused (authentication, policy): not worth a retry
        return fail_conn(k, status < 100 ? kMalformed : lasting ? kProxy : kConnect,
                         "proxy answered CONNECT with '" + line.substr(0, 200) + "'"), false;
      }
      c.head.clear();
      c.stage = c.tls != nullptr ? Stage::kHandshake : Stage::kSending;
      return true;
    }
  }

  // A new TLS session on c's socket (nothing on plain http); false: errno says why.
  bool start_tls(Conn& c) {
#ifdef FASTPREP_HAVE_OPENSSL
    if (tls_ctx_ == nullptr) return true;
    c.tls = SSL_new(static_cast<SSL_CTX*>(tls_ctx_));
    Address ip;  // a numeric name is checked against the certificate's IP addresses, and sent no SNI
    bool numeric = parse_address(server_name_, 443, ip);
    if (c.tls == nullptr || SSL_set_fd(c.tls, c.fd) != 1 ||
        (numeric ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c.tls), server_name_.c_str()) != 1
                 : SSL_set_tlsext_host_name(c.tls, server_name_.c_str()) != 1 ||
                       SSL_set1_host(c.tls, server_name_.c_str()) != 1)) {
      errno = ENOMEM;
      return false;
    }
    SSL_set_connect_state(c.tls);
#else
    (void)c;
#endif
    return true;
  }

  // The TLS handshake, a step at a time; false once the request has failed.
  bool handshake(size_t k) {
#ifdef FASTPREP_HAVE_OPENSSL
    Conn& c = conns_[k];
    ERR_clear_error();
    int r = SSL_do_handshake(c.tls);
    if (r == 1) {
      c.stage = Stage::kSending;
      return true;
    }
    int err = SSL_get_error(c.tls, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      watch_out(k, err == SSL_ERROR_WANT_WRITE);
      return true;
    }
    std::string why = "TLS handshake failed";
    long verify = SSL_get_verify_result(c.tls);
    if (verify != X509_V_OK) {
      why += std::string(": certificate verify failed: ") + X509_verify_cert_error_string(verify);
    } else if (unsigned long e = ERR_get_error()) {
      char text[256];
      ERR_error_string_n(e, text, sizeof text);
      why += std::string(": ") + text;
    }
    ERR_clear_error();
    c.reused = false;
    fail_conn(k, kTls, why);
    return false;
#else
    (void)k;
    return true;
#endif
  }

  // What a socket (or its TLS session) gave: > 0 bytes, 0 the peer closed, -1 nothing yet
  // (EPOLLOUT watched when TLS must write first), -2 failed (`why` says how). A received read
  // may run on into `spill` (plain sockets): more than n bytes.
  ssize_t io(size_t k, char* buffer, size_t n, bool sending, std::string& why, char* spill = nullptr,
             size_t spill_n = 0) {
    Conn& c = conns_[k];
#ifdef FASTPREP_HAVE_OPENSSL
    if (c.tls != nullptr && c.stage != Stage::kTunnelSend && c.stage != Stage::kTunnelHead) {
      ERR_clear_error();
      errno = 0;
      int r = sending ? SSL_write(c.tls, buffer, (int)std::min<size_t>(n, 1 << 30))
                      : SSL_read(c.tls, buffer, (int)std::min<size_t>(n, 1 << 30));
      if (r > 0) {
        if (!sending) watch_out(k, false);  // a read that needed a write (a key update) is done
        return r;
      }
      int err = SSL_get_error(c.tls, r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        watch_out(k, err == SSL_ERROR_WANT_WRITE);
        return -1;
      }
      if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0))
        return 0;
      why = std::string("TLS: ") + (err == SSL_ERROR_SYSCALL && errno ? strerror(errno) : "connection broken");
      ERR_clear_error();
      return -2;
    }
#endif
    iovec parts[2] = {{buffer, n}, {spill, spill_n}};
    for (;;) {
      ssize_t r = sending ? ::send(c.fd, buffer, n, MSG_NOSIGNAL)
                  : spill != nullptr ? ::readv(c.fd, parts, 2)
                                     : ::recv(c.fd, buffer, n, 0);
      if (r >= 0) return r;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (sending) watch_out(k, true);
        return -1;
      }
      why = std::string(sending ? "send: " : "connection reset: ") + strerror(errno);
      return -2;
    }
  }

  // Whether the TLS session holds received bytes not read yet.
  static bool tls_pending(const Conn& c) {
#ifdef FASTPREP_HAVE_OPENSSL
    return c.tls != nullptr && SSL_pending(c.tls) > 0;
#else
    (void)c;
    return false;
#endif
  }

  // Level-triggered: EPOLLOUT is watched only while there is something to send.
  void watch_out(size_t k, bool out) {
    Conn& c = conns_[k];
    if (c.watching_out == out) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0u);
    ev.data.u32 = (uint32_t)k;
    epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    c.watching_out = out;
  }

  void start_next(size_t k) {
    while (!pending_.empty() || next_ < n_) {
      int64_t i;
      if (!pending_.empty()) {
        i = pending_.front();
        pending_.pop_front();
      } else {
        i = next_++;
      }
      Conn& c = conns_[k];
      c.request = i;
      c.sent = 0;
      c.head.clear();
      c.chunks.clear();
      c.line.clear();
      c.got = 0;
      c.extra = 0;
      c.body = at::Tensor();
      c.deadline = std::chrono::steady_clock::now() + timeout_;
      int64_t now = ++g_in_flight;
      started_++;
      in_flight_sum_ += now;
      max_in_flight_ = std::max(max_in_flight_, now);
      if (c.fd < 0 && !open(k)) {
        int err = errno;
        close_conn(k);
        c.reused = false;
        finish(k);
        fail_request(i, kConnect, std::string(strerror(err)));
        continue;
      }
      if (c.stage == Stage::kConnecting) return;  // sent once the connection is up (EPOLLOUT)
      if (c.stage == Stage::kTunnelSend) {
        if (!tunnel(k)) continue;
        if (c.stage == Stage::kTunnelSend || c.stage == Stage::kTunnelHead) return;
      }
      if (c.stage == Stage::kHandshake) {  // connected at once: the handshake's first step now
        if (!handshake(k)) continue;       // failed, and said so: the slot takes the next request
        if (c.stage == Stage::kHandshake) return;
      }
      send_some(k);
      return;
    }
  }

  void send_some(size_t k) {
    Conn& c = conns_[k];
    const std::string& out = heads_[(size_t)c.request];
    while (c.sent < out.size()) {
      std::string why;
      ssize_t w = io(k, const_cast<char*>(out.data()) + c.sent, out.size() - c.sent, true, why);
      if (w == -1) return;
      if (w <= 0) {
        fail_conn(k, kReset, w == 0 ? "send: connection closed" : why);
        start_next(k);
        return;
      }
      c.sent += (size_t)w;
    }
    c.stage = Stage::kHead;
    watch_out(k, false);
  }

  void step(size_t k, uint32_t events) {
    Conn& c = conns_[k];
    if (c.stage == Stage::kConnecting) {
      if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        c.reused = false;
        fail_conn(k, kConnect, std::string(strerror(err)));
        start_next(k);
        return;
      }
      c.stage = connected(c);
    }
    if (c.stage == Stage::kTunnelSend || c.stage == Stage::kTunnelHead) {
      if (!tunnel(k)) {
        start_next(k);
        return;
      }
      if (c.stage == Stage::kTunnelSend || c.stage == Stage::kTunnelHead) return;
    }
    if (c.stage == Stage::kHandshake) {
      if (!handshake(k)) {
        start_next(k);
        return;
      }
      if (c.stage == Stage::kHandshake) return;
    }
    if (c.stage == Stage::kSending) {
      send_some(k);
      if (c.request < 0 || c.stage == Stage::kSending) return;
    }
    receive(k);
  }

  // Reads what the socket has and advances the response; completes or fails the request.
  void receive(size_t k) {
    Conn& c = conns_[k];
    char buffer[64 << 10];
    char spill[64];  // where bytes past a body's end land (read with its last bytes, no extra call)
    for (;;) {
      char* into = buffer;
      size_t room = sizeof buffer;
      if (c.stage == Stage::kBody) {  // straight into the body's tensor
        into = reinterpret_cast<char*>(c.body.data_ptr<uint8_t>()) + c.got;
        room = (size_t)(c.length - c.got);
      }
      std::string why;
      ssize_t r = room == 0 ? 0 : io(k, into, room, false, why, c.stage == Stage::kBody ? spill : nullptr,
                                      sizeof spill);
      if (r == -1) return;
      if (r < 0) {
        fail_conn(k, kReset, why);
        start_next(k);
        return;
      }
      if (r == 0 && room != 0) {  // the server closed the connection
        if (c.stage == Stage::kToClose) {
          complete(k, c.chunks);
        } else {
          fail_conn(k, kReset, c.head.empty() && c.got == 0 ? "connection closed before a response"
                                                            : "connection closed mid-response");
        }
        start_next(k);
        return;
      }
      if (c.stage == Stage::kBody) {
        if ((size_t)r > room || (c.got + r == c.length && tls_pending(c))) {
          fail_conn(k, kMalformed, kSurplus);
          start_next(k);
          return;
        }
        c.got += r;
        if (c.got == c.length) {
          complete(k, {});
          start_next(k);
          return;
        }
        continue;
      }
      if (!consume(k, buffer, (size_t)r)) {
        start_next(k);
        return;
      }
    }
  }

  // Feeds received bytes through the head and chunk stages; false once the request is over.
  bool consume(size_t k, const char* data, size_t n) {
    Conn& c = conns_[k];
    std::string rest;
    if (c.stage == Stage::kHead) {
      c.head.append(data, n);
      for (;;) {
        size_t end = c.head.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (c.head.size() > kMaxHead) return fail_conn(k, kMalformed, "response headers too long"), false;
          return true;
        }
        if (!parse_head(c, end)) return fail_conn(k, kMalformed, "malformed response head"), false;
        if (c.status >= 200) break;
        // 1xx: interim responses are skipped (RFC 9110 section 15.2); 101 would switch protocols, unasked
        if (c.status == 101) return fail_conn(k, kMalformed, "101 Switching Protocols to a plain GET"), false;
        c.extra += end + 4;
        if (c.extra > kMaxHead) return fail_conn(k, kMalformed, "interim (1xx) responses too long"), false;
        c.head.erase(0, end + 4);
      }
      size_t end = c.head.find("\r\n\r\n");
      rest = c.head.substr(end + 4);
      if (c.length > max_body_) return fail_conn(k, kTooLarge, "response body too large"), false;
      if (c.stage == Stage::kBody) {
        try {  // a length within max_body that cannot be had is refused, as a larger one is
          c.body = at::empty({c.length}, at::kByte);
        } catch (const std::exception&) {
          return fail_conn(k, kTooLarge, "cannot allocate a response body of " + std::to_string(c.length) + " bytes"),
                 false;
        }
        size_t take = std::min(rest.size(), (size_t)c.length);
        if (take) std::memcpy(c.body.data_ptr<uint8_t>(), rest.data(), take);
        c.got = (int64_t)take;
        if (rest.size() > take) return fail_conn(k, kMalformed, kSurplus), false;
        if (c.got == c.length) {
          if (tls_pending(c)) return fail_conn(k, kMalformed, kSurplus), false;
          return complete(k, {}), false;
        }
        return true;
      }
      data = rest.data();
      n = rest.size();
    }
    return chunked(k, data, n);
  }

  bool chunked(size_t k, const char* data, size_t n) {
    Conn& c = conns_[k];
    size_t i = 0;
    while (i < n) {
      if (c.stage == Stage::kToClose) {
        c.chunks.append(data + i, n - i);
        if ((int64_t)c.chunks.size() > max_body_) return fail_conn(k, kTooLarge, "response body too large"), false;
        return true;
      }
      if (c.stage == Stage::kChunkData) {
        size_t take = std::min(n - i, (size_t)c.chunk_left);
        c.chunks.append(data + i, take);
        i += take;
        c.chunk_left -= (int64_t)take;
        if ((int64_t)c.chunks.size() > max_body_) return fail_conn(k, kTooLarge, "response body too large"), false;
        if (c.chunk_left == 0) c.stage = Stage::kChunkEnd;
        continue;
      }
      // kChunkSize / kChunkEnd: a line ending in CRLF
      c.line.push_back(data[i++]);
      if (c.line.size() > 4096) return fail_conn(k, kMalformed, "malformed chunked body"), false;
      if (c.line.size() < 2 || c.line.compare(c.line.size() - 2, 2, "\r\n") != 0) continue;
      std::string text = c.line.substr(0, c.line.size() - 2);
      c.line.clear();
      if (c.stage == Stage::kChunkEnd) {
        if (!text.empty()) return fail_conn(k, kMalformed, "malformed chunked body"), false;
        c.stage = Stage::kChunkSize;
        continue;
      }
      if (c.stage == Stage::kTrailer) {  // trailer fields, ignored, up to an empty line
        c.extra += text.size() + 2;
        if (c.extra > kMaxHead) return fail_conn(k, kMalformed, "chunked trailers too long"), false;
        if (!text.empty()) continue;
        if (i < n || tls_pending(c)) return fail_conn(k, kMalformed, kSurplus), false;
        complete(k, c.chunks);
        return false;
      }
      size_t semi = text.find(';');
      if (semi != std::string::npos) text.resize(semi);
      if (text.empty() || text.size() > 15 || text.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        return fail_conn(k, kMalformed, "malformed chunked body"), false;
      c.chunk_left = std::stoll(text, nullptr, 16);
      c.stage = c.chunk_left == 0 ? Stage::kTrailer : Stage::kChunkData;  // after the last chunk, its trailers
    }
    return true;
  }

  void complete(size_t k, const std::string& buffered) {
    Conn& c = conns_[k];
    int64_t i = c.request;
    if (c.stage != Stage::kBody) {
      c.body = at::empty({(int64_t)buffered.size()}, at::kByte);
      if (!buffered.empty()) std::memcpy(c.body.data_ptr<uint8_t>(), buffered.data(), buffered.size());
    }
    bodies_[i] = c.body;
    status_.data_ptr<int64_t>()[i] = c.status;
    int64_t* info = heads_info_.data_ptr<int64_t>() + 4 * i;
    std::copy(c.range, c.range + 3, info);
    info[3] = c.stage != Stage::kToClose;
    done_++;
    c.body = at::Tensor();
    finish(k);
    if (c.keep_alive && c.stage != Stage::kToClose) {
      epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
      pool().give(key_, {c.fd, c.tls});
      c.fd = -1;
      c.tls = nullptr;
      c.watching_out = false;
    } else {
      close_conn(k);
    }
    c.stage = Stage::kSending;
  }

  std::string key_;
  Address address_;
  const std::vector<std::string>& heads_;
  void* tls_ctx_;  // SSL_CTX*, null: plain http
  std::string server_name_;
  std::string tunnel_;  // "CONNECT ..." to send through a proxy before anything else, "" none
  std::chrono::steady_clock::duration timeout_;
  int64_t max_body_;
  int64_t n_;
  std::vector<at::Tensor> bodies_;
  std::vector<std::string> errors_;
  at::Tensor status_;
  at::Tensor heads_info_;  // per request: Content-Range's first, last, size; whether the body's end was framed
  std::vector<Conn> conns_;
  std::vector<char> resent_;  // sent again after a stale pooled connection
  std::deque<int64_t> pending_;
  int64_t next_ = 0, done_ = 0;
  int ep_ = -1;
  int64_t started_ = 0, in_flight_sum_ = 0, max_in_flight_ = 0;
};

// Per request its body (uint8 1-D; an error response's body too), its HTTP status or a negative
// Failure code, the reason of a failure ("" otherwise), [its Content-Range's first, last and size
// (-1 for a "*" size; first -1: none, -2: not one "bytes first-last/size"), 1 where the body's end
// was framed (Content-Length, chunked), 0 where it was the connection's close], and [requests
// started, the sum over them of the process's requests in flight as each started, the most in
// flight].
std::tuple<std::vector<at::Tensor>, at::Tensor, std::vector<std::string>, at::Tensor, at::Tensor> http_get(
    const std::string& host, int64_t port, const std::vector<std::string>& heads, int64_t concurrency,
    double timeout_s, int64_t max_body, bool tls, const std::string& server_name, const std::string& ca_file,
    const std::string& tunnel) {
  const ExitGate gate;  // ends park their thread at interpreter exit (exit_gate.h)
  TORCH_CHECK(port > 0 && port < 65536, "http_get: port must be in [1, 65535], got ", port);
  TORCH_CHECK(concurrency >= 1, "http_get: concurrency must be >= 1, got ", concurrency);
  TORCH_CHECK(timeout_s > 0, "http_get: timeout_s must be > 0, got ", timeout_s);
  TORCH_CHECK(max_body >= 0, "http_get: max_body must be >= 0, got ", max_body);
  Address address;
  TORCH_CHECK(parse_address(host, port, address), "http_get: host must be a numeric IPv4 or IPv6 address, got '",
              host, "'");
  void* ctx = nullptr;
  if (tls) {
#ifdef FASTPREP_HAVE_OPENSSL
    std::string error;
    ctx = tls_context(ca_file, error);
    TORCH_CHECK(ctx != nullptr, "http_get: ", error);
    TORCH_CHECK(!server_name.empty(), "http_get: tls needs the server's name");
#else
    TORCH_CHECK(false, "http_get: this build of fastprep has no TLS (built without OpenSSL)");
#endif
  }
  std::string key = host + "|" + std::to_string(port) + (tls ? "|tls|" + server_name + "|" + ca_file : "") +
                    (tunnel.empty() ? "" : "|" + tunnel);
  Batch batch(key, address, heads, concurrency, timeout_s, max_body, ctx, server_name, tunnel);
  if (!heads.empty()) batch.run();
  return batch.result();
}

}  // namespace

// Whether this build speaks TLS.
bool http_tls() {
#ifdef FASTPREP_HAVE_OPENSSL
  return true;
#else
  return false;
#endif
}

TORCH_LIBRARY_IMPL(fastprep, CompositeImplicitAutograd, m) {
  m.impl("http_get", &http_get);
  m.impl("http_tls", &http_tls);
}

}  // namespace fastprep
