#include "auditor/reports/report_util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace kvcanary::auditor::report_internal {

using nlohmann::json;

// ---- Reading the document leniently: a missing or mistyped field is absent.

namespace {

const json& Empty() {
  static const json* const kNull = new json();
  return *kNull;
}

}  // namespace

const json& Get(const json& j, const char* key) {
  if (!j.is_object()) return Empty();
  const auto it = j.find(key);
  return it == j.end() ? Empty() : *it;
}

// A string as text; numbers and booleans as JSON; anything else "".
std::string Text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  return "";
}
std::string Str(const json& j, const char* key) { return Text(Get(j, key)); }

int64_t Int(const json& v, int64_t missing) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    return static_cast<int64_t>(
        std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::fabs(d) < 9e18) return std::llround(d);
  }
  return missing;
}

double Num(const json& v, double missing) {
  return v.is_number() ? v.get<double>() : missing;
}

const json& Arr(const json& j, const char* key) {
  static const json* const kEmpty = new json(json::array());
  const json& v = Get(j, key);
  return v.is_array() ? v : *kEmpty;
}

// 12345 -> "12,345": counts are read by people.
std::string Count(int64_t n) {
  std::string digits = absl::StrCat(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// ---- Text that XML 1.0 and HTML accept.

namespace {

// Valid UTF-8 with only characters XML 1.0 allows (C1 controls excluded
// too); invalid bytes and disallowed characters become U+FFFD.
std::string Sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    uint32_t cp = len == 1   ? b
                  : len == 2 ? b & 0x1F
                  : len == 3 ? b & 0x0F
                             : b & 0x07;
    bool ok = len > 0 && b <= 0xF4 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    const bool well_formed = ok && cp >= kMin[len] && cp <= 0x10FFFF;
    const bool allowed =
        well_formed &&
        (cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp < 0x7F) ||
         (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
         cp >= 0x10000);
    if (allowed) {
      out.append(s.substr(i, len));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    // A malformed sequence resynchronises at the next byte.
    i += well_formed ? len : 1;
  }
  return out;
}

// The character reference standing for `c` in XML 1.0 and HTML text and
// in double-quoted attribute values (where tabs and line breaks must be
// references to survive), or nullptr to keep `c`.
const char* Reference(char c) {
  switch (c) {
    case '&':
      return "&amp;";
    case '<':
      return "&lt;";
    case '>':
      return "&gt;";
    case '"':
      return "&quot;";
    case '\'':
      return "&#39;";
    case '\t':
      return "&#9;";
    case '\n':
      return "&#10;";
    case '\r':
      return "&#13;";
  }
  return nullptr;
}

}  // namespace

// Any string from the document, ready for XML or HTML text or attributes.
// `text`: an XML text node, where tabs and line feeds may stay as they are.
std::string Esc(std::string_view raw, bool text) {
  std::string out;
  for (const char c : Sanitize(raw)) {
    const char* ref = text && (c == '\n' || c == '\t') ? nullptr : Reference(c);
    if (ref != nullptr) {
      out += ref;
    } else {
      out += c;
    }
  }
  return out;
}

// ---- The parts both reports share.

bool Names(const json& incident, const std::string& tenant) {
  if (Str(incident, "reader") == tenant || Str(incident, "writer") == tenant) {
    return true;
  }
  for (const json& t : Arr(incident, "tenants")) {
    if (Text(t) == tenant) return true;
  }
  return false;
}

int SeverityRank(const std::string& severity) {
  if (severity == "critical") return 0;
  if (severity == "high") return 1;
  if (severity == "medium") return 2;
  if (severity == "low") return 3;
  return 4;
}

// "globex" or "-" for a null writer or reader.
std::string TenantOrDash(const json& incident, const char* role) {
  const std::string t = Str(incident, role);
  return t.empty() ? "-" : t;
}

// "31 plants accepted whole, floor 20".
std::string CoverageLine(const json& detector, const std::string& tenant) {
  const json& cov = Get(Get(detector, "coverage"), tenant.c_str());
  const std::string unit = Str(detector, "unit");
  return absl::StrCat(cov.is_number() ? Count(Int(cov)) : "no", " ",
                      unit.empty() ? "units" : unit, ", floor ",
                      Count(Int(Get(detector, "floor"))));
}

bool BelowFloor(const json& detector, const std::string& tenant) {
  const json& cov = Get(Get(detector, "coverage"), tenant.c_str());
  return Int(cov, -1) < Int(Get(detector, "floor"));
}

}  // namespace kvcanary::auditor::report_internal
