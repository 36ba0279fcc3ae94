// The one escape for strings that come from outside (checkpoint files, config values, plugin file
// names, the user's own arguments echoed back): what reaches a message, a listing or JSON output
// passes through escape_untrusted() at the point it leaves the parser, so a crafted file can never
// write control sequences to the user's terminal or hide the rest of a message behind a NUL.
#pragma once

#include <nibble/export.hpp>

#include <string>
#include <string_view>

namespace nibble {

/// `s` with printable ASCII and valid, printable UTF-8 kept as they are; every other byte (control
/// characters, DEL, bytes of invalid UTF-8) becomes `\xNN`, a valid code point that is a control
/// or a bidirectional override (C1, U+2028/9, U+200E/F, U+202A-E, U+2066-9, U+FEFF) becomes
/// `\u{NNNN}`, and a backslash becomes `\\`, so the result is printable and unambiguous.
NIBBLE_API std::string escape_untrusted(std::string_view s);

/// `s` escaped as above and cut to at most `max_chars` characters of the result, with "..." and
/// the original byte count appended when it was cut (for names that may be megabytes long).
NIBBLE_API std::string escape_untrusted(std::string_view s, size_t max_chars);

/// `s` escaped and wrapped in single quotes, the form messages use for names: 'model.q_proj'.
NIBBLE_API std::string quoted_untrusted(std::string_view s);

/// Whether `s` is entirely valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
NIBBLE_API bool is_valid_utf8(std::string_view s);

}  // namespace nibble
