package com.squarespace.jersey2.guice;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;

import org.glassfish.hk2.api.ServiceLocatorFactory;
import org.glassfish.hk2.extension.ServiceLocatorGenerator;
import org.glassfish.jersey.internal.inject.Injections;

/**
 * Stand-in for jersey2-guice 0.10's class of this name, placed before it on the class path.
 *
 * <p>It installs a ServiceLocatorGenerator into Jersey's Injections and HK2's
 * ServiceLocatorFactory as the library does, but writes a final field without clearing its
 * FINAL bit through Field.modifiers (which Java 12 and later hide from reflection): a static
 * final field is written through sun.misc.Unsafe, an instance field through Field.set after
 * setAccessible, which Java 17 allows for ordinary classes.
 */
final class InjectionsUtils {
    private static final String GENERATOR = "generator";
    private static final String DEFAULT_GENERATOR = "defaultGenerator";

    private InjectionsUtils() {}

    /** True when Jersey no longer has the static generator field (a Jersey that needs no hook). */
    public static boolean hasFix() {
        try {
            Injections.class.getDeclaredField(GENERATOR);
            return false;
        } catch (NoSuchFieldException absent) {
            return true;
        }
    }

    public static void install(ServiceLocatorGenerator generator) {
        try {
            if (!hasFix()) {
                write(Injections.class.getDeclaredField(GENERATOR), null, generator);
            }
            ServiceLocatorFactory factory = ServiceLocatorFactory.getInstance();
            write(factory.getClass().getDeclaredField(DEFAULT_GENERATOR), factory, generator);
        } catch (ReflectiveOperationException | SecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    public static List<ServiceLocatorGenerator> getServiceLocatorGenerators() {
        List<ServiceLocatorGenerator> out = new ArrayList<>();
        try {
            if (!hasFix()) {
                Object g = read(Injections.class.getDeclaredField(GENERATOR), null);
                if (g != null) {
                    out.add((ServiceLocatorGenerator) g);
                }
            }
            ServiceLocatorFactory factory = ServiceLocatorFactory.getInstance();
            Object g = read(factory.getClass().getDeclaredField(DEFAULT_GENERATOR), factory);
            if (g != null) {
                out.add((ServiceLocatorGenerator) g);
            }
        } catch (ReflectiveOperationException | SecurityException e) {
            throw new IllegalStateException(e);
        }
        return out;
    }

    private static Object read(Field field, Object target) throws IllegalAccessException {
        field.setAccessible(true);
        return field.get(target);
    }

    private static void write(Field field, Object target, Object value)
            throws ReflectiveOperationException {
        int mods = field.getModifiers();
        if (Modifier.isStatic(mods) && Modifier.isFinal(mods)) {
            sun.misc.Unsafe unsafe = unsafe();
            unsafe.putObjectVolatile(
                    unsafe.staticFieldBase(field), unsafe.staticFieldOffset(field), value);
            return;
        }
        field.setAccessible(true);
        field.set(target, value);
    }

    private static sun.misc.Unsafe unsafe() throws ReflectiveOperationException {
        Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
        f.setAccessible(true);
        return (sun.misc.Unsafe) f.get(null);
    }
}
