#include "canaries/marker.h"

#include <array>
#include <iterator>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/check.h"

namespace kvcanary::canaries {
namespace {

// 256 concrete nouns, sorted (docs/canaries.md tells how they were chosen):
// nouns that stories260K writes itself and repeats from its context, no
// function words, none that mostly occurs inside a fixed two-noun phrase
// ("teddy bear", "ice cream", "toy car"). 2 to 6 tok512 tokens each (mean
// 3.6; tok512 has almost no whole-word nouns).
constexpr const char* kWords[] = {
    "ant",     "apple",   "arrow",     "baby",     "bag",      "ball",
    "banana",  "band",    "barber",    "basket",   "bath",     "beach",
    "bean",    "bear",    "bed",       "bedroom",  "bee",      "bell",
    "bench",   "bike",    "bird",      "blanket",  "blocks",   "boat",
    "book",    "bottle",  "bowl",      "box",      "branch",   "bread",
    "bridge",  "brother", "brush",     "bucket",   "bug",      "bunny",
    "bus",     "bush",    "butterfly", "cage",     "cake",     "candy",
    "car",     "castle",  "cat",       "cave",     "chair",    "cheese",
    "chest",   "church",  "clock",     "clown",    "coat",     "coin",
    "comb",    "couch",   "cow",       "crab",     "cream",    "creek",
    "crown",   "cube",    "cup",       "deer",     "desk",     "diamond",
    "dirt",    "doctor",  "dog",       "doll",     "door",     "dragon",
    "drawer",  "dress",   "drum",      "duck",     "ear",      "elephant",
    "eraser",  "face",    "fairy",     "farm",     "farmer",   "feather",
    "fence",   "fire",    "fish",      "flag",     "flour",    "flower",
    "flute",   "food",    "forest",    "fork",     "fox",      "fridge",
    "frog",    "fruit",   "game",      "garden",   "gate",     "gift",
    "glass",   "goat",    "gold",      "grass",    "guitar",   "hair",
    "hand",    "hat",     "hill",      "hole",     "honey",    "horse",
    "house",   "hug",     "island",    "jacket",   "jar",      "jewel",
    "jug",     "juice",   "jungle",    "key",      "king",     "kite",
    "knight",  "ladder",  "lady",      "lake",     "lamp",     "leaf",
    "letter",  "light",   "lion",      "lunch",    "machine",  "mailbox",
    "map",     "marble",  "market",    "melon",    "milk",     "mirror",
    "monkey",  "monster", "moon",      "mouse",    "mouth",    "movie",
    "mud",     "muffin",  "music",     "nest",     "oasis",    "owl",
    "paint",   "panda",   "paper",     "party",    "pasta",    "path",
    "peach",   "pear",    "pebble",    "pencil",   "penguin",  "phone",
    "picture", "pig",     "pigeon",    "pillow",   "pizza",    "plate",
    "pole",    "pond",    "pot",       "princess", "puddle",   "pumpkin",
    "puppy",   "puzzle",  "queen",     "rabbit",   "race",     "rain",
    "rainbow", "raven",   "river",     "road",     "robot",    "rock",
    "room",    "rope",    "rug",       "sand",     "sandwich", "scarf",
    "sea",     "seat",    "seed",      "shadow",   "sheep",    "shelf",
    "shell",   "ship",    "shirt",     "shoe",     "shop",     "sister",
    "sky",     "slide",   "snake",     "sock",     "song",     "soup",
    "spider",  "spoon",   "squirrel",  "stairs",   "star",     "stick",
    "stone",   "store",   "storm",     "street",   "string",   "sun",
    "swing",   "tail",    "teacher",   "temple",   "tent",     "tiger",
    "tooth",   "tower",   "town",      "train",    "tree",     "truck",
    "turtle",  "van",     "vase",      "vine",     "wagon",    "wall",
    "water",   "whistle", "wind",      "window",   "wolf",     "woods",
    "yard",    "zebra",   "zipper",    "zoo",
};
static_assert(sizeof(kWords) / sizeof(kWords[0]) == kWordListSize);

Marker Render(absl::string_view id_prefix, const MarkerSeed& seed,
              int num_words) {
  Marker marker;
  marker.id = absl::StrCat(id_prefix, HexEncode(absl::MakeConstSpan(
                                          seed.bytes.data(), kMarkerIdBytes)));
  marker.words.reserve(num_words);
  for (int i = 0; i < num_words; ++i) {
    marker.words.push_back(seed.bytes[kMarkerIdBytes + i]);
  }
  marker.text = MarkerText(marker.words);
  return marker;
}

}  // namespace

const std::vector<std::string>& MarkerWordList() {
  static const auto* const kList =
      new std::vector<std::string>(std::begin(kWords), std::end(kWords));
  return *kList;
}

int MarkerWordIndex(absl::string_view word) {
  static const auto* const kIndex = [] {
    auto* index = new absl::flat_hash_map<std::string, int>();
    for (int i = 0; i < kWordListSize; ++i) index->emplace(kWords[i], i);
    return index;
  }();
  auto it = kIndex->find(word);
  return it == kIndex->end() ? -1 : it->second;
}

std::string MarkerText(const std::vector<int>& words) {
  std::string text;
  for (int w : words) {
    CHECK(w >= 0 && w < kWordListSize) << "word index " << w;
    if (!text.empty()) text.push_back(' ');
    text.append(kWords[w]);
  }
  return text;
}

Marker RenderMarker(const MarkerSeed& seed) {
  return Render("m", seed, kMarkerWords);
}

Marker DeriveMarker(absl::string_view secret_key, absl::string_view tenant,
                    absl::string_view campaign, uint64_t counter) {
  return RenderMarker(DeriveMarkerSeed(secret_key, tenant, campaign, counter));
}

Marker DeriveNonce(absl::string_view secret_key, absl::string_view tenant,
                   absl::string_view campaign, uint64_t counter) {
  const std::string marker_message =
      EncodeMarkerSeedMessage(tenant, campaign, counter);
  const std::string message = absl::StrCat(
      kNonceSeedLabel,
      absl::string_view(marker_message).substr(kMarkerSeedLabel.size()));
  absl::StatusOr<std::array<uint8_t, kHmacSha256Bytes>> mac =
      HmacSha256(secret_key, message);
  CHECK(mac.ok()) << mac.status();
  MarkerSeed seed;
  seed.bytes = *mac;
  return Render("n", seed, kNonceWords);
}

}  // namespace kvcanary::canaries
