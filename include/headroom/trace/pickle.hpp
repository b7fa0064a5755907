// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// pickle_writer: a streaming writer of Python pickles, protocol 4, using only the opcodes that
// PyTorch's MemoryViz.js unpickler reads: PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS,
// APPENDS, SHORT_BINUNICODE, BINUNICODE, BININT1, BININT2, BININT, LONG1, NEWTRUE, NEWFALSE,
// NONE, BINFLOAT, TUPLE2, MEMOIZE, BINGET, LONG_BINGET, STOP. No FRAME (optional in protocol 4).
// shared_string() writes a repeated string once and refers to it after (the memo), so 20 000
// events naming one 10 KB file cost 10 KB, not 200 MB.
//
//   pickle_writer w;
//   w.begin_dict(); w.key("segments"); w.begin_list(); w.end_list(); w.end_dict();
//   std::string bytes = w.finish();
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "headroom/core/error.hpp"

namespace headroom::trace {

class pickle_writer {
 public:
  static constexpr int protocol = 4;

  pickle_writer() {
    out_.push_back(static_cast<char>(0x80));  // PROTO
    out_.push_back(static_cast<char>(protocol));
  }

  /// Containers: begin_* pushes an empty one and a mark; end_* adds what follows the mark.
  void begin_dict() { op('}', '('); }   // EMPTY_DICT MARK
  void end_dict() { close('u'); }        // SETITEMS
  void begin_list() { op(']', '('); }    // EMPTY_LIST MARK
  void end_list() { close('e'); }        // APPENDS
  /// A dict key; the value follows.
  void key(std::string_view k) { string(k); }

  /// key(k) then v, written by its type (bool, signed, unsigned, floating point or string).
  template <class T>
  void item(std::string_view k, T const& v) {
    key(k);
    if constexpr (std::is_same_v<T, bool>) {
      boolean(v);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      integer(v);
    } else if constexpr (std::is_integral_v<T>) {
      unsigned_integer(v);
    } else if constexpr (std::is_floating_point_v<T>) {
      real(v);
    } else {
      string(std::string_view(v));
    }
  }

  void string(std::string_view s) {
    if (s.size() < 256) {
      out_.push_back(static_cast<char>(0x8c));  // SHORT_BINUNICODE
      out_.push_back(static_cast<char>(s.size()));
    } else {
      expects(s.size() <= std::numeric_limits<std::uint32_t>::max(), "trace::pickle_writer: string of ", s.size(),
              " bytes exceeds the 4 GiB a pickle string holds");
      out_.push_back('X');  // BINUNICODE
      le(static_cast<std::uint64_t>(s.size()), 4);
    }
    out_.append(s);
  }

  /// string(s) the first time, a reference to that value after (same text, same object on
  /// load). Short strings are written in full: a reference costs 2 to 5 bytes. The text must
  /// outlive the writer (snapshot strings do).
  void shared_string(std::string_view s) {
    if (s.size() < min_shared_bytes) return string(s);
    auto const [it, added] = memo_.try_emplace(s, static_cast<std::uint32_t>(memo_.size()));
    if (added) {
      string(s);
      out_.push_back(static_cast<char>(0x94));  // MEMOIZE: the next memo index, memo_.size() - 1
      return;
    }
    if (it->second < 256) {
      out_.push_back('h');  // BINGET
      le(it->second, 1);
    } else {
      out_.push_back('j');  // LONG_BINGET
      le(it->second, 4);
    }
  }

  void integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out_.push_back('K');  // BININT1
      le(static_cast<std::uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      out_.push_back('M');  // BININT2
      le(static_cast<std::uint64_t>(v), 2);
    } else if (v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max()) {
      out_.push_back('J');  // BININT (signed)
      le(static_cast<std::uint64_t>(static_cast<std::uint32_t>(static_cast<std::int32_t>(v))), 4);
    } else {
      // LONG1: the shortest little-endian two's complement that keeps the sign.
      auto const bits = static_cast<std::uint64_t>(v);
      int n = 8;
      while (n > 1) {
        auto const top = static_cast<std::uint8_t>(bits >> (8 * (n - 1)));
        auto const next_sign = static_cast<std::uint8_t>(bits >> (8 * (n - 2))) & 0x80;
        if ((top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0)) {
          --n;
        } else {
          break;
        }
      }
      out_.push_back(static_cast<char>(0x8a));
      out_.push_back(static_cast<char>(n));
      le(bits, n);
    }
  }

  /// Unsigned values above INT64_MAX take a 9-byte LONG1 (the viewer reads it as a BigInt).
  void unsigned_integer(std::uint64_t v) {
    if (v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      integer(static_cast<std::int64_t>(v));
      return;
    }
    out_.push_back(static_cast<char>(0x8a));
    out_.push_back(9);
    le(v, 8);
    out_.push_back(0);
  }

  void boolean(bool b) { out_.push_back(static_cast<char>(b ? 0x88 : 0x89)); }  // NEWTRUE / NEWFALSE
  void none() { out_.push_back('N'); }

  void real(double d) {
    out_.push_back('G');  // BINFLOAT, big-endian
    auto const bits = std::bit_cast<std::uint64_t>(d);
    for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }

  /// Makes a 2-tuple of the last two values written.
  void tuple2() { out_.push_back(static_cast<char>(0x86)); }

  /// STOP, and the bytes. Throws logic_error when a container is still open.
  [[nodiscard]] std::string finish() {
    expects<logic_error>(depth_ == 0, "trace::pickle_writer::finish: ", depth_,
                         " container(s) still open; expected every begin_* closed by its end_*");
    out_.push_back('.');
    return std::move(out_);
  }

 private:
  void op(char a, char b) {
    out_.push_back(a);
    out_.push_back(b);
    ++depth_;
  }
  void close(char c) {
    expects<logic_error>(depth_ > 0, "trace::pickle_writer: end of a container that was not begun");
    out_.push_back(c);
    --depth_;
  }
  void le(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }

  static constexpr std::size_t min_shared_bytes = 8;

  std::string out_;
  int depth_ = 0;
  std::unordered_map<std::string_view, std::uint32_t> memo_;
};

}  // namespace headroom::trace
