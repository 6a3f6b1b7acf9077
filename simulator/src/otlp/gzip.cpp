// gzip with zlib. gunzip bounds its output: a few kilobytes of hostile input
// can inflate to gigabytes.
#include <zlib.h>

#include "tracecorr/otlp.hpp"

namespace tracecorr::otlp {
namespace {

// Owns a z_stream; inflateEnd/deflateEnd run however the caller leaves.
class ZStream {
 public:
  enum class Mode { Deflate, Inflate };
  // windowBits 15 + 16: gzip header and trailer (RFC 1952); 15: zlib (RFC 1950).
  explicit ZStream(Mode mode, int window_bits = 15 + 16) : mode_(mode) {
    ok_ = (mode == Mode::Deflate
               ? deflateInit2(&stream_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY)
               : inflateInit2(&stream_, window_bits)) == Z_OK;
  }
  ~ZStream() {
    if (ok_) (mode_ == Mode::Deflate ? deflateEnd(&stream_) : inflateEnd(&stream_));
  }
  ZStream(const ZStream&) = delete;
  ZStream& operator=(const ZStream&) = delete;
  bool ok() const { return ok_; }
  z_stream* get() { return &stream_; }

 private:
  Mode mode_;
  z_stream stream_{};
  bool ok_ = false;
};

}  // namespace

std::string gzip_compress(std::string_view data) {
  ZStream z(ZStream::Mode::Deflate);
  if (!z.ok()) return {};
  std::string out;
  out.resize(deflateBound(z.get(), data.size()) + 32);
  z.get()->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.get()->avail_in = static_cast<uInt>(data.size());
  z.get()->next_out = reinterpret_cast<Bytef*>(out.data());
  z.get()->avail_out = static_cast<uInt>(out.size());
  if (deflate(z.get(), Z_FINISH) != Z_STREAM_END) return {};
  out.resize(z.get()->total_out);
  return out;
}

namespace {

Expected<std::string> inflate_bounded(std::string_view data, std::size_t max_output, int window_bits,
                                      const std::string& format) {
  ZStream z(ZStream::Mode::Inflate, window_bits);
  if (!z.ok()) return make_error("zlib could not start inflating", format);
  std::string out;
  char buffer[16384];
  z.get()->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.get()->avail_in = static_cast<uInt>(data.size());
  for (;;) {
    z.get()->next_out = reinterpret_cast<Bytef*>(buffer);
    z.get()->avail_out = sizeof buffer;
    int rc = inflate(z.get(), Z_NO_FLUSH);
    std::size_t produced = sizeof buffer - z.get()->avail_out;
    if (out.size() + produced > max_output)
      return make_error(ErrorKind::kTooLong, "decompressed size exceeds the " + std::to_string(max_output) + "-byte limit",
                        format + " body at input offset " + std::to_string(z.get()->total_in));
    out.append(buffer, produced);
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && z.get()->avail_in == 0)
      return make_error(ErrorKind::kTruncated, "truncated: the stream ends before its trailer", format + " body at input offset " +
                                                                                 std::to_string(z.get()->total_in));
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return make_error("not " + format + ": " + (z.get()->msg ? z.get()->msg : "inflate failed"),
                        format + " body at input offset " + std::to_string(z.get()->total_in));
  }
  if (z.get()->avail_in != 0)
    return make_error(std::to_string(z.get()->avail_in) + " bytes after the end of the " + format + " stream", format + " body");
  return out;
}

}  // namespace

Expected<std::string> gunzip(std::string_view data, std::size_t max_output) {
  return inflate_bounded(data, max_output, 15 + 16, "gzip");
}

Expected<std::string> inflate_zlib(std::string_view data, std::size_t max_output) {
  return inflate_bounded(data, max_output, 15, "deflate");
}

}  // namespace tracecorr::otlp
