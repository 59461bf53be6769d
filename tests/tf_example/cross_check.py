"""Cross-check for sluice's tf.train.Example parser with Python's protobuf module.

The message types are built from a descriptor at run time (the same field numbers and types as
tf.train.Example), so TensorFlow is not needed.
  cross_check.py write OUT   writes 10 Examples serialised by protobuf, each as u32 length + bytes
  cross_check.py read IN     parses one serialised Example, prints "name kind values..." per feature
"""
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def message_classes():
    f = descriptor_pb2.FileDescriptorProto(name="sluice_check_example.proto", package="sluice_check", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto

    def msg(name, fields, nested=None, map_entry=False):
        m = f.message_type.add(name=name) if nested is None else nested.nested_type.add(name=name)
        if map_entry:
            m.options.map_entry = True
        for (fname, num, ftype, label, tname, oneof) in fields:
            fd = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                fd.type_name = tname
            if oneof is not None:
                fd.oneof_index = oneof
        return m

    rep, opt = T.LABEL_REPEATED, T.LABEL_OPTIONAL
    msg("BytesList", [("value", 1, T.TYPE_BYTES, rep, None, None)])
    msg("FloatList", [("value", 1, T.TYPE_FLOAT, rep, None, None)])
    msg("Int64List", [("value", 1, T.TYPE_INT64, rep, None, None)])
    feat = msg("Feature", [("bytes_list", 1, T.TYPE_MESSAGE, opt, ".sluice_check.BytesList", 0),
                           ("float_list", 2, T.TYPE_MESSAGE, opt, ".sluice_check.FloatList", 0),
                           ("int64_list", 3, T.TYPE_MESSAGE, opt, ".sluice_check.Int64List", 0)])
    feat.oneof_decl.add(name="kind")
    feats = msg("Features", [("feature", 1, T.TYPE_MESSAGE, rep, ".sluice_check.Features.FeatureEntry", None)])
    msg("FeatureEntry", [("key", 1, T.TYPE_STRING, opt, None, None),
                         ("value", 2, T.TYPE_MESSAGE, opt, ".sluice_check.Feature", None)], nested=feats, map_entry=True)
    msg("Example", [("features", 1, T.TYPE_MESSAGE, opt, ".sluice_check.Features", None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    d = pool.FindMessageTypeByName("sluice_check.Example")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(d)
    return message_factory.MessageFactory(pool).GetPrototype(d)


def main():
    Example = message_classes()
    if sys.argv[1] == "write":
        with open(sys.argv[2], "wb") as out:
            for i in range(10):
                ex = Example()
                fm = ex.features.feature
                fm["image/format"].bytes_list.value.append(b"jpeg")
                img = "jpeg-bytes-of-" + chr(ord("a") + i % 26) * (i % 7 + 1)
                fm["image/encoded"].bytes_list.value.append(img.encode())
                fm["image/class/label"].int64_list.value.append(i - 5)
                fm["bbox/xmin"].float_list.value.extend([i + 0.125 * k for k in range(i % 4)])
                if i % 4 == 0:  # an empty float_list must still be set
                    fm["bbox/xmin"].float_list.SetInParent()
                b = ex.SerializeToString()
                out.write(struct.pack("<I", len(b)) + b)
    else:
        ex = Example()
        with open(sys.argv[2], "rb") as f:
            ex.ParseFromString(f.read())
        for name in sorted(ex.features.feature):
            feat = ex.features.feature[name]
            kind = feat.WhichOneof("kind")
            vals = list(getattr(feat, kind).value)
            if kind == "bytes_list":
                print(name, "bytes", " ".join(v.decode() for v in vals))
            elif kind == "float_list":
                print(name, "float", " ".join(repr(v) for v in vals))
            else:
                print(name, "int64", " ".join(str(v) for v in vals))


if __name__ == "__main__":
    main()
