// The Python module's run-time fields: sluice.wds(path, fields={name: sluice.field(...)}),
// sluice.shard / mds / tfrecord / npy(path, fields=...). Every field of a sample the trainer names, each
// with its members (WebDataset extensions; a shard's field, an MDS column or a tf.train.Example
// feature by name), its element type (given, or an .npy member's own, read from the first shard;
// a sluice shard's as stored; an MDS column's; record 0's list), an optional image decode and its
// collator (stack, normalized, ragged, pad, pack), composed at run time over the C++ core's
// run-time samples (io/wds.hpp's wds_any, io/shard_fields.hpp's shard_any, io/mds.hpp's mds_any,
// io/tf_example.hpp's tf_example_any, io/npy.hpp's npy_any, stage/any_decode.hpp, stage/any_collate.hpp): one loader
// type serves every combination, with one indirect call a field and sample.
#include "image_codec.hpp"

#include <algorithm>

#include "sluice/io/mds.hpp"
#include "sluice/io/npy.hpp"
#include "sluice/io/shard_fields.hpp"
#include "sluice/io/tf_example.hpp"
#include "sluice/io/wds.hpp"
#include "sluice/io/wds_tar.hpp"
#include "sluice/stage/any_collate.hpp"
#include "sluice/stage/any_decode.hpp"
#if SLUICE_WITH_TURBOJPEG && SLUICE_WITH_PNG
#include "sluice/codec/mask.hpp"
#endif

namespace sluice_module {

namespace {

constexpr const char* kFields = "fields= data (a sample has the fields it names, not one label)";

sluice::dtype dtype_named(const field_option& f) {
  static const std::pair<const char*, sluice::dtype> known[] = {
      {"uint8", sluice::dtype::u8},     {"int8", sluice::dtype::i8},     {"uint16", sluice::dtype::u16},
      {"int16", sluice::dtype::i16},    {"uint32", sluice::dtype::u32},  {"int32", sluice::dtype::i32},
      {"uint64", sluice::dtype::u64},   {"int64", sluice::dtype::i64},   {"float16", sluice::dtype::f16},
      {"float32", sluice::dtype::f32},  {"float64", sluice::dtype::f64}, {"bfloat16", sluice::dtype::bf16},
      {"bool", sluice::dtype::boolean}};
  for (const auto& [n, t] : known)
    if (f.dtype == n) return t;
  bad_value("sluice.field('" + f.members + "', dtype", "'" + f.dtype + "')",
            "'uint8', 'int8', 'uint16', 'int16', 'uint32', 'int32', 'uint64', 'int64', 'float16', 'float32', "
            "'float64', 'bfloat16' or 'bool'");
}

// An .npy member's element type; what a tensor cannot hold is a UsageError naming the field.
sluice::dtype dtype_of_npy(const sluice::io::npy_dtype& d, const field_option& f, const std::string& shard) {
  try {
    return sluice::io::npy_element_type(d, shard);
  } catch (const sluice::format_error&) {
    throw sluice::usage_error("sluice.field('" + f.members + "'): the .npy members of " + shard + " hold dtype '" +
                              d.descr + "', which has no tensor type (numbers and bool only)");
  }
}

// Whether a field takes member extension `ext` (lower case, as split_key gives it): extensions
// match in any case.
bool takes(const std::string& members, std::string_view ext) {
  const std::string lower = sluice::io::detail::lower_ascii(members);
  std::string_view m = lower;
  while (true) {
    const std::size_t semi = m.find(';');
    if (m.substr(0, semi) == ext) return true;
    if (semi == std::string_view::npos) return false;
    m.remove_prefix(semi + 1);
  }
}

// The element type of each field: given, else an .npy member's own (the first one of the first
// shard), else uint8 (the member's bytes).
std::vector<sluice::dtype> types_of(const std::vector<field_option>& fields, const std::string& first_shard) {
  std::vector<sluice::dtype> t(fields.size(), sluice::dtype::u8);
  std::vector<bool> open(fields.size(), false);
  std::size_t want = 0;
  for (std::size_t k = 0; k < fields.size(); ++k) {
    if (!fields[k].dtype.empty()) {
      t[k] = dtype_named(fields[k]);
    } else if (!fields[k].decode) {
      open[k] = true;
      ++want;
    }
  }
  if (want == 0) return t;
  const sluice::io::mapped_file file(first_shard);  // an io_error naming it when it is missing
  std::string lower;
  sluice::io::detail::walk_tar(file.bytes(), first_shard, false, [&](const sluice::io::detail::tar_member_view& m) {
    std::string_view key, ext;
    if (!sluice::io::detail::split_key(m.name, key, ext, lower)) return true;
    for (std::size_t k = 0; k < fields.size(); ++k) {
      if (!open[k] || !takes(fields[k].members, ext)) continue;
      if (sluice::io::detail::is_npy_ext(ext))
        t[k] = dtype_of_npy(sluice::io::detail::parse_npy_header(m.body, first_shard).dtype, fields[k], first_shard);
      open[k] = false;
      --want;
    }
    return want != 0;
  });
  return t;
}

sluice::image_layout layout_named(const std::string& l, const std::string& where) {
  if (l.empty()) return sluice::image_layout::none;
  if (l == "chw") return sluice::image_layout::chw;
  if (l == "hwc") return sluice::image_layout::hwc;
  bad_value(where, "'" + l + "'", "'chw' or 'hwc'");
}

sluice::any_field_collator collator_of(const field_option& f) {
  if (f.collate == "stack") return sluice::stack<>{.shape = f.shape};
  if (f.collate == "normalized")
    return sluice::normalized<>{.mean = f.mean, .std = f.std,
                                .output = layout_named(f.output_layout, "sluice.normalized(layout")};
  if (f.collate == "ragged") return sluice::ragged<>{.row = f.row};
  if (f.collate == "pad")
    return sluice::pad<>{.value = f.value, .length = f.length, .multiple = f.multiple, .mask = f.mask,
                         .truncate = f.truncate, .row = f.row};
  if (f.collate == "pack") return sluice::pack<>{.length = f.length, .split = f.split, .value = f.value};
  bad_value("collate", "'" + f.collate + "'", "'stack', 'normalized', 'ragged', 'pad' or 'pack'");
}

#if SLUICE_WITH_TURBOJPEG
// The fields that follow image `image` (sluice.boxes_of / points_of, their rows_of): one
// follower a field of rows, one for the columns of one image's boxes (points), each with the
// fields that take its rows. The sluice package checks the roles as a whole (_check_follow);
// any_decode_stage checks the types and names.
std::vector<sluice::any_follower> followers_of(const std::vector<field_option>& fields, const std::string& image) {
  std::vector<sluice::any_follower> out;
  std::vector<std::vector<std::string>> names;  // of each follower's fields, for rows_of
  std::size_t columns[2] = {0, 0};  // boxes, points: 1 + the index in out of its columns' follower
  for (const auto& f : fields) {
    if (f.follow_of != image || f.follow != "mask") continue;
#if SLUICE_WITH_PNG
    if (f.ignore_index < 0 || f.ignore_index > 255)
      bad_value("sluice.mask_of(ignore_index", std::to_string(f.ignore_index) + ")", "a class id of 0..255");
    out.push_back(sluice::any_mask(f.name, static_cast<std::uint8_t>(f.ignore_index)));
    names.push_back({f.name});
#else
    throw sluice::usage_error("sluice.field('" + f.members + "', follow=sluice.mask_of(...)): this module was built without libpng");
#endif
  }
  for (const auto& f : fields) {
    if (f.follow_of != image || (f.follow != "boxes" && f.follow != "points")) continue;
    const bool boxes = f.follow == "boxes";
    const sluice::codecs::box_options bo{.format = box_format_of(f.box_format, "sluice.boxes_of: format"),
                                         .normalized = f.normalized, .drop_outside = f.drop_outside,
                                         .min_size = f.min_size, .min_visible = f.min_visible};
    const sluice::codecs::point_options po{.normalized = f.normalized, .drop_outside = f.drop_outside};
    const std::size_t row = boxes ? 4 : 2;
    if (f.coordinate >= static_cast<int>(row))
      throw sluice::usage_error("sluice.field('" + f.members + "'): coordinate " + std::to_string(f.coordinate) + " of " + f.follow);
    if (f.coordinate < 0) {
      out.push_back(boxes ? sluice::any_boxes({f.name}, {}, bo) : sluice::any_points({f.name}, {}, po));
      names.push_back({f.name});
      continue;
    }
    std::size_t& c = columns[boxes ? 0 : 1];
    if (c == 0) {
      out.push_back(boxes ? sluice::any_boxes(std::vector<std::string>(row), {}, bo)
                          : sluice::any_points(std::vector<std::string>(row), {}, po));
      names.emplace_back();
      c = out.size();
    }
    out[c - 1].coordinates[static_cast<std::size_t>(f.coordinate)] = f.name;
  }
  // The column groups' names, once every column is in.
  for (std::size_t i = 0; i < out.size(); ++i)
    if (names[i].empty()) names[i] = out[i].coordinates;
  for (const auto& f : fields) {
    if (f.follow != "rows") continue;
    for (std::size_t i = 0; i < out.size(); ++i)
      if (std::find(names[i].begin(), names[i].end(), f.follow_of) != names[i].end()) out[i].with.push_back(f.name);
  }
  return out;
}
#endif

}  // namespace

namespace {

// Decode and collate as the fields say, over `data` (wds_any or shard_any), with the sampler the
// options name (class_balanced where the data has labels).
template <class Data>
loader_ptr fields_loader(const options& o, Data data, const std::vector<std::int64_t>& labels) {
  for (const auto& f : o.fields) {
    if (f.follow != "boxes" && f.follow != "points" && f.follow != "mask") continue;
    const auto img = std::find_if(o.fields.begin(), o.fields.end(), [&](const field_option& g) { return g.name == f.follow_of; });
    if (img == o.fields.end() || !img->decode)
      throw sluice::usage_error("sluice.field('" + f.members + "') follows '" + f.follow_of +
                                "', which is not a decoded image among the fields");
  }
  sluice::any_decode_stage dec(data.schema());
  for (const auto& f : o.fields) {
    if (!f.decode) continue;
#if SLUICE_WITH_TURBOJPEG
    options io = o;
    io.size = f.size;
    io.random_resized_crop = f.random_resized_crop;
    io.flip = f.flip;
    io.layout = f.layout;
    dec.add(f.name, codec_of(io), followers_of(o.fields, f.name));
#else
    throw sluice::usage_error("sluice.field('" + f.members + "', decode=...): this module was built without TurboJPEG");
#endif
  }
  std::vector<sluice::field_collate_spec> collators;
  for (const auto& f : o.fields) collators.push_back({f.name, collator_of(f)});
  const sluice::batch_options bo{.batch = o.batch_size, .drop_last = o.drop_last};
  sluice::any_collate col(bo, dec.schema(), std::move(collators));
  const std::size_t n = data.size();
  auto build = [&](auto s) {
    return sluice::python::wrap(sluice::from(std::move(s)) | sluice::read(std::move(data)) | std::move(dec) |
                                std::move(col) | sluice::prefetch(depth_of(o), loader_opts(o)));
  };
  if (labels.empty()) return with_order_sampler(o, n, build, kFields);
  return with_sampler(o, n, labels, build);
}

// Where the files store each field's type (a shard, an MDS dataset), a dtype= given must be it:
// a UsageError naming the field, the stored type and the way out otherwise. `stored(f)` says
// where ("the shard P stores field 'x' as").
template <class Where>
void check_stored_types(const options& o, const sluice::any_schema& s, Where stored) {
  for (std::size_t k = 0; k < o.fields.size(); ++k) {
    const auto& f = o.fields[k];
    if (!f.dtype.empty() && dtype_named(f) != s[k].type)
      throw sluice::usage_error("sluice.field('" + f.members + "', dtype='" + f.dtype + "'): " + stored(f) + " " +
                                sluice::dtype_name(s[k].type) + "; leave dtype= out to take the stored type");
  }
}

// A sluice shard's fields: the element types are the shard's; a dtype given must agree.
loader_ptr shard_fields_loader(const options& o) {
  sluice::io::shard_any::names_type names;
  for (const auto& f : o.fields) names.emplace_back(f.name, f.members);
  sluice::io::shard_any data(o.path, {}, names);
  check_stored_types(o, data.schema(),
                     [&](const field_option& f) { return "the shard " + o.path + " stores field '" + f.members + "' as"; });
  auto labels = data.labels();
  if (std::all_of(labels.begin(), labels.end(), [](std::int64_t l) { return l < 0; })) labels.clear();
  return fields_loader(o, std::move(data), labels);
}

// An MDS dataset's columns: each field's type is its column's (a dtype given must agree).
loader_ptr mds_fields_loader(const options& o) {
  sluice::io::mds_any::names_type columns;
  for (const auto& f : o.fields) columns.emplace_back(f.name, f.members);
  sluice::io::mds_any data(o.path, columns);
  check_stored_types(o, data.schema(),
                     [&](const field_option& f) { return "the MDS column '" + f.members + "' of " + o.path + " holds"; });
  for (std::size_t k = 0; k < o.fields.size(); ++k)
    if (o.fields[k].decode) data.check_image_column(k);  // a 'pil' column (raw pixels) decodes as no image
  return fields_loader(o, std::move(data), {});
}

// A TFRecord file of tf.train.Example: each field reads the feature its members name, typed as
// given or as record 0's list; a field stacked is fixed at record 0's count.
loader_ptr tfrecord_fields_loader(const options& o) {
  std::vector<sluice::io::tf_field> fields;
  for (const auto& f : o.fields) {
    const bool fixed = (f.collate == "stack" || f.collate == "normalized") && !f.decode;
    fields.push_back({f.name, f.members, f.dtype.empty() ? std::nullopt : std::optional(dtype_named(f)),
                      fixed ? sluice::extent::fixed : sluice::extent::variable});
  }
  return fields_loader(o, sluice::io::tf_example_any(sluice::io::tfrecord_reader(shards_of(o)), std::move(fields)), {});
}

// .npy arrays of one length in the folder path=: each field one array (its members the file
// name, or an absolute path), typed and shaped as the array's rows (a dtype given must agree).
loader_ptr npy_fields_loader(const options& o) {
  sluice::io::npy_any::names_type arrays;
  for (const auto& f : o.fields)
    arrays.emplace_back(f.name, !f.members.empty() && f.members.front() == '/' ? f.members : o.path + "/" + f.members);
  sluice::io::npy_any data(arrays);
  check_stored_types(o, data.schema(), [&](const field_option& f) { return "the array " + f.members + " holds"; });
  return fields_loader(o, std::move(data), {});
}

// The NumPy name of a field's element type (as Python users write dtype=), for messages.
std::string numpy_name(sluice::dtype t) {
  switch (t) {
    case sluice::dtype::u8: return "uint8";
    case sluice::dtype::i8: return "int8";
    case sluice::dtype::u16: return "uint16";
    case sluice::dtype::i16: return "int16";
    case sluice::dtype::u32: return "uint32";
    case sluice::dtype::i32: return "int32";
    case sluice::dtype::u64: return "uint64";
    case sluice::dtype::i64: return "int64";
    case sluice::dtype::f16: return "float16";
    case sluice::dtype::bf16: return "bfloat16";
    case sluice::dtype::f32: return "float32";
    case sluice::dtype::f64: return "float64";
    case sluice::dtype::boolean: return "bool";
  }
  return sluice::dtype_name(t);
}

}  // namespace

// sluice.shard(path) without fields= or decode= on a shard with fields (sluice-pack npy of a
// non-uint8 array, --fields, --features): every field stacked under its own name with its stored
// dtype and shape. A variable field, shape=, mean=/std= and an output= other than the fields' own
// dtype are UsageErrors naming the shard and its fields (never the record's bytes as uint8).
loader_ptr make_shard_fields_as_stored_loader(const options& o) {
  const sluice::io::shard_reader r(o.path);
  std::string fields;
  for (const auto& f : r.schema())
    fields += (fields.empty() ? "" : ", ") + f.name + " (" + sluice::io::schema_field_text(f) + ")";
  const std::string what = "sluice.shard: " + o.path + " is a shard with fields (" + fields + ")";
  if (!o.shape.empty())
    throw sluice::usage_error(what + ", each stored with its own shape; shape= is for a shard of single records");
  if (!o.mean.empty() || !o.std.empty())
    throw sluice::usage_error(what + "; mean=/std= normalise single uint8 records: read the field with "
                                     "fields={name: sluice.field(name, collate=sluice.normalized(mean=..., std=...))}");
  options c = o;
  c.output.clear();
  for (const auto& f : r.schema()) {
    if (f.kind != sluice::extent::fixed)
      throw sluice::usage_error(what + ": field '" + f.name +
                                "' is variable, with no one shape to stack; name the fields "
                                "to read with fields= (sluice.ragged() or sluice.pad() collate a variable field) or "
                                "decode= for images");
    // Every field arrives as stored: output= may only name its own type, never convert its bytes
    // (a field "label" is the labels, int64 whatever output= says, as for single records).
    if (!o.output.empty() && f.name != "label" && o.output != numpy_name(f.type))
      throw sluice::usage_error(what + ": output='" + o.output + "' for field '" + f.name + "' of dtype " +
                                numpy_name(f.type) +
                                "; a shard's fields arrive with their stored dtype and shape (leave "
                                "output= out)");
    field_option fo;
    fo.name = f.name;
    fo.members = f.name;
    c.fields.push_back(std::move(fo));
  }
  return shard_fields_loader(c);
}

loader_ptr make_fields_loader(const options& o) {
  if (o.path.empty()) throw sluice::usage_error("sluice." + o.source + ": needs a path");
  if (o.source == "shard") return shard_fields_loader(o);
  if (o.source == "npy") return npy_fields_loader(o);
  if (o.source == "mds") return mds_fields_loader(o);
  if (o.source == "tfrecord") return tfrecord_fields_loader(o);
  const auto shards = shards_of(o);
  const auto types = types_of(o.fields, shards.front());
  std::vector<sluice::field_spec> specs;
  sluice::io::wds_dataset_options wo;
  for (std::size_t k = 0; k < o.fields.size(); ++k) {
    const auto& f = o.fields[k];
    const bool fixed = f.collate == "stack" || f.collate == "normalized";
    // A text member stacked: the number it holds needs its dtype (uint8 would do for class ids
    // under 256 only, and is no one's label type), text as text a variable collator.
    if (fixed && f.dtype.empty() && !f.decode) {
      const std::string members = sluice::io::detail::lower_ascii(f.members);
      std::string_view m = members;
      while (!m.empty()) {
        const std::string_view ext = m.substr(0, m.find(';'));
        if (sluice::io::detail::is_text_ext(ext) && !sluice::io::detail::is_npy_ext(ext))
          throw sluice::usage_error("sluice.field('" + f.members + "') for field '" + f.name + "': '." + std::string(ext) +
                                    "' members hold text; give dtype= (e.g. 'int64') for the number each holds, or "
                                    "collate=sluice.ragged() (or pad()) to keep the text as bytes");
        m.remove_prefix(std::min(m.size(), ext.size() + 1));
      }
    }
    specs.push_back({f.name, types[k], fixed ? sluice::extent::fixed : sluice::extent::variable});
    wo.extensions.emplace_back(f.name, f.members);
  }
  return fields_loader(o, sluice::io::wds_any(shards, std::move(specs), std::move(wo)), {});
}

}  // namespace sluice_module
