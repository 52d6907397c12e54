// bench/http_clients_curl.cpp: the libcurl side of bench/bench_http_clients.py, loaded there through
// ctypes after it compiles this file with g++ (-lcurl). A batch of GETs to one server is run through
// libcurl's multi interface with a given number in flight, as torch.ops.fastprep.http_get runs them:
// the same request heads (the caller passes each request's URL and its header lines, signature
// included), keep-alive connections kept between calls (in the multi handle's connection cache), and
// each body written into a buffer of the object's listed size, allocated when its request starts.
//
// Two ways to drive the multi handle:
//   mode 0, "poll":   curl_multi_perform + curl_multi_poll (libcurl waits on the sockets itself);
//   mode 1, "socket": curl_multi_socket_action with the caller's epoll set, fed by libcurl's socket
//                     and timer callbacks (the event-driven API, meant for many connections).
// Not part of fastprep: a measurement only.
#include <curl/curl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Body {  // one request's body: a buffer of its listed size
  unsigned char* data = nullptr;
  int64_t capacity = 0;
  int64_t length = 0;
};

struct Slot {  // an easy handle, reused for one request after another
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  int64_t index = -1;
};

struct Client {
  CURLM* multi = nullptr;
  int mode = 0;
  int epoll_fd = -1;
  bool timer_armed = false;
  Clock::time_point timer_at;
  std::vector<Slot> slots;
  std::string ca_file;
  long buffer_size = 0;
  int64_t connects = 0;  // connections opened (CURLINFO_NUM_CONNECTS), since the last http_clients_connects
};

struct Batch {  // one call's requests and answers
  Client* client;
  int64_t n;
  const char* const* urls;
  const char* const* headers;  // per request: NUL-terminated lines, then an empty one
  const int64_t* sizes;
  unsigned char** buffers;  // out: each request's buffer (freed by http_clients_free)
  int64_t* status;          // out: the HTTP status, or -(CURLcode)
  int64_t* lengths;         // out: the bytes received
  std::vector<Body> bodies;
  int64_t next = 0, done = 0;
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<Body*>(user);
  size_t bytes = size * count;
  if (body->length + static_cast<int64_t>(bytes) > body->capacity) return CURL_WRITEFUNC_ERROR;
  std::memcpy(body->data + body->length, data, bytes);
  body->length += static_cast<int64_t>(bytes);
  return bytes;
}

int on_socket(CURL*, curl_socket_t fd, int what, void* user, void*) {
  auto* client = static_cast<Client*>(user);
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(client->epoll_fd, EPOLL_CTL_DEL, fd, nullptr);  // fails harmlessly when already gone
    return 0;
  }
  epoll_event event{};
  event.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
  event.data.fd = fd;
  if (epoll_ctl(client->epoll_fd, EPOLL_CTL_MOD, fd, &event) != 0)
    epoll_ctl(client->epoll_fd, EPOLL_CTL_ADD, fd, &event);
  return 0;
}

int on_timer(CURLM*, long timeout_ms, void* user) {
  auto* client = static_cast<Client*>(user);
  client->timer_armed = timeout_ms >= 0;
  if (client->timer_armed) client->timer_at = Clock::now() + std::chrono::milliseconds(timeout_ms);
  return 0;
}

void start(Batch& batch, Slot& slot) {
  int64_t i = batch.next++;
  Body& body = batch.bodies[i];
  body.capacity = batch.sizes[i];
  body.data = static_cast<unsigned char*>(std::malloc(body.capacity > 0 ? body.capacity : 1));
  batch.buffers[i] = body.data;
  curl_slist_free_all(slot.headers);
  curl_slist* list = nullptr;
  for (const char* line = batch.headers[i]; *line; line += std::strlen(line) + 1) list = curl_slist_append(list, line);
  slot.headers = curl_slist_append(list, "Accept:");  // no "Accept: */*": the same head as http_get's
  slot.index = i;
  curl_easy_setopt(slot.easy, CURLOPT_URL, batch.urls[i]);
  curl_easy_setopt(slot.easy, CURLOPT_HTTPHEADER, slot.headers);
  curl_easy_setopt(slot.easy, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(slot.easy, CURLOPT_PRIVATE, &slot);
  curl_multi_add_handle(batch.client->multi, slot.easy);
}

// Records the finished transfers and starts the next requests on their handles.
void reap(Batch& batch) {
  CURLM* multi = batch.client->multi;
  int left = 0;
  while (CURLMsg* message = curl_multi_info_read(multi, &left)) {
    if (message->msg != CURLMSG_DONE) continue;
    CURL* easy = message->easy_handle;
    CURLcode result = message->data.result;
    Slot* slot = nullptr;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, reinterpret_cast<char**>(&slot));
    long code = 0, connects = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
    batch.client->connects += connects;
    batch.status[slot->index] = result == CURLE_OK ? code : -static_cast<int64_t>(result);
    batch.lengths[slot->index] = batch.bodies[slot->index].length;
    curl_multi_remove_handle(multi, easy);
    ++batch.done;
    if (batch.next < batch.n) start(batch, *slot);
  }
}

void run_poll(Batch& batch) {
  int running = 0;
  while (batch.done < batch.n) {
    curl_multi_perform(batch.client->multi, &running);
    reap(batch);
    if (batch.done < batch.n) curl_multi_poll(batch.client->multi, nullptr, 0, 1000, nullptr);
  }
}

void run_socket(Batch& batch) {
  Client& client = *batch.client;
  int running = 0;
  epoll_event events[64];
  curl_multi_socket_action(client.multi, CURL_SOCKET_TIMEOUT, 0, &running);
  reap(batch);
  while (batch.done < batch.n) {
    int wait_ms = 1000;
    if (client.timer_armed) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(client.timer_at - Clock::now()).count();
      wait_ms = left < 0 ? 0 : static_cast<int>(left < 1000 ? left : 1000);
    }
    int ready = epoll_wait(client.epoll_fd, events, 64, wait_ms);
    for (int k = 0; k < ready; ++k) {
      uint32_t got = events[k].events;
      int flags = (got & EPOLLIN ? CURL_CSELECT_IN : 0) | (got & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                  (got & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(client.multi, events[k].data.fd, flags, &running);
    }
    if (client.timer_armed && Clock::now() >= client.timer_at) {
      client.timer_armed = false;
      curl_multi_socket_action(client.multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    reap(batch);
  }
}

}  // namespace

extern "C" {

const char* http_clients_version() { return curl_version(); }

// A client for `mode` (0: poll, 1: socket); `ca_file` "" for plain http.
void* http_clients_open(int mode, const char* ca_file, long buffer_size) {
  static bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!initialised) return nullptr;
  auto* client = new Client();
  client->mode = mode;
  client->ca_file = ca_file;
  client->buffer_size = buffer_size;
  client->multi = curl_multi_init();
  curl_multi_setopt(client->multi, CURLMOPT_MAXCONNECTS, 1024L);
  if (mode == 1) {
    client->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    curl_multi_setopt(client->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(client->multi, CURLMOPT_SOCKETDATA, client);
    curl_multi_setopt(client->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(client->multi, CURLMOPT_TIMERDATA, client);
  }
  return client;
}

// Sets up `count` easy handles (reused by every later call): the options a request does not change.
static void ensure_slots(Client& client, int64_t count, double timeout_s) {
  while (static_cast<int64_t>(client.slots.size()) < count) {
    Slot slot;
    slot.easy = curl_easy_init();
    CURL* easy = slot.easy;
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(easy, CURLOPT_PROXY, "");  // no proxy from the environment
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
    if (client.buffer_size > 0) curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, client.buffer_size);
    if (!client.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, client.ca_file.c_str());
    client.slots.push_back(slot);
  }
}

// Runs `n` GETs, `concurrency` in flight; returns how many answered 200 with their listed size.
int64_t http_clients_run(void* handle, int64_t n, const char* const* urls, const char* const* headers,
                         const int64_t* sizes, int64_t concurrency, double timeout_s, unsigned char** buffers,
                         int64_t* status, int64_t* lengths) {
  auto* client = static_cast<Client*>(handle);
  int64_t width = concurrency < n ? concurrency : n;
  ensure_slots(*client, width, timeout_s);
  curl_multi_setopt(client->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, static_cast<long>(width));
  Batch batch{client, n, urls, headers, sizes, buffers, status, lengths, std::vector<Body>(n)};
  for (int64_t k = 0; k < width; ++k) start(batch, client->slots[k]);
  if (client->mode == 1)
    run_socket(batch);
  else
    run_poll(batch);
  int64_t good = 0;
  for (int64_t i = 0; i < n; ++i) good += status[i] == 200 && lengths[i] == sizes[i];
  return good;
}

// The connections opened since the last call (0 where every request reused a kept-alive one).
int64_t http_clients_connects(void* handle) {
  auto* client = static_cast<Client*>(handle);
  int64_t n = client->connects;
  client->connects = 0;
  return n;
}

void http_clients_free(unsigned char** buffers, int64_t n) {
  for (int64_t i = 0; i < n; ++i) std::free(buffers[i]);
}

void http_clients_close(void* handle) {
  auto* client = static_cast<Client*>(handle);
  for (Slot& slot : client->slots) {
    curl_multi_remove_handle(client->multi, slot.easy);
    curl_easy_cleanup(slot.easy);
    curl_slist_free_all(slot.headers);
  }
  curl_multi_cleanup(client->multi);
  if (client->epoll_fd >= 0) close(client->epoll_fd);
  delete client;
}

}  // extern "C"
